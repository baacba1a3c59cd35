// Package namespaces is the storage of core/v1 Namespaces. There is no
// namespace controller in this server: deleting a Namespace removes it at
// once (no spec.finalizers are added, so it is never Terminating), from then
// on Check refuses new objects in it, and then the function set with
// OnDelete deletes what is left inside (the server deletes Services, which
// releases their IPs, and Events). default, kube-system and kube-public may
// not be deleted.
package namespaces

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
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool { return false }

func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	ns.Spec.Finalizers = nil
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	ns, oldNs := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	ns.Status = oldNs.Status
	ns.Spec.Finalizers = oldNs.Spec.Finalizers
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	ns := obj.(*corev1.Namespace)
	return apimachineryvalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apimachineryvalidation.ValidateNamespaceName, field.NewPath("metadata"))
}

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	ns, oldNs := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	return apimachineryvalidation.ValidateObjectMetaUpdate(&ns.ObjectMeta, &oldNs.ObjectMeta, field.NewPath("metadata"))
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string      { return nil }
func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }
func (strategy) Canonicalize(obj runtime.Object)                                        {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                               { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                          { return true }

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetAttrs returns labels and selectable fields: metadata.name, status.phase.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, nil, fmt.Errorf("not a Namespace: %T", obj)
	}
	fs := generic.ObjectMetaFieldsSet(&ns.ObjectMeta, false)
	fs["status.phase"] = string(ns.Status.Phase)
	return ns.Labels, fs, nil
}
