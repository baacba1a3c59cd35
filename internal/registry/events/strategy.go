// Package events is the storage of core/v1 Events. Events expire one hour
// after their last write (etcd lease TTL), as with kube-apiserver's default
// --event-ttl.
package events

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool                                    { return true }
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {}
func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	ev := obj.(*corev1.Event)
	errs := apimachineryvalidation.ValidateObjectMeta(&ev.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if ev.InvolvedObject.Namespace != "" && ev.InvolvedObject.Namespace != ev.Namespace {
		errs = append(errs, field.Invalid(field.NewPath("involvedObject", "namespace"), ev.InvolvedObject.Namespace, "does not match event.namespace"))
	}
	return errs
}

func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	ev, oldEv := obj.(*corev1.Event), old.(*corev1.Event)
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&ev.ObjectMeta, &oldEv.ObjectMeta, field.NewPath("metadata"))
	return append(errs, s.Validate(ctx, obj)...)
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string      { return nil }
func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }
func (strategy) Canonicalize(obj runtime.Object)                                        {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                               { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                          { return true }

// GetAttrs returns labels and the selectable fields upstream offers for Events.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("not an Event: %T", obj)
	}
	fs := generic.ObjectMetaFieldsSet(&ev.ObjectMeta, true)
	fs["involvedObject.kind"] = ev.InvolvedObject.Kind
	fs["involvedObject.namespace"] = ev.InvolvedObject.Namespace
	fs["involvedObject.name"] = ev.InvolvedObject.Name
	fs["involvedObject.uid"] = string(ev.InvolvedObject.UID)
	fs["involvedObject.apiVersion"] = ev.InvolvedObject.APIVersion
	fs["involvedObject.resourceVersion"] = ev.InvolvedObject.ResourceVersion
	fs["involvedObject.fieldPath"] = ev.InvolvedObject.FieldPath
	fs["reason"] = ev.Reason
	fs["reportingComponent"] = ev.ReportingController
	fs["source"] = ev.Source.Component
	fs["type"] = ev.Type
	return ev.Labels, fs, nil
}
