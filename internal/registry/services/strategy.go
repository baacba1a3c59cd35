// Package services is the storage of core/v1 Services: strategies, field
// selectors, the kubectl table and the REST storage, with cluster IP
// allocation delegated to pkg/servicealloc.
package services

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// strategy is the create/update/delete behaviour of Services (spec).
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// statusStrategy is the behaviour of the status subresource.
type statusStrategy struct{ strategy }

// NewStrategies returns the strategies of the main resource and of status.
func NewStrategies(typer runtime.ObjectTyper) (strategy, statusStrategy) {
	s := strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
	return s, statusStrategy{s}
}

func (strategy) NamespaceScoped() bool { return true }

func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	svc := obj.(*corev1.Service)
	svc.Status = corev1.ServiceStatus{}
}

// PrepareForUpdate keeps the stored status (a spec update cannot write it),
// except that a Service that stops being a LoadBalancer loses its
// load-balancer status, as upstream.
func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = *oldSvc.Status.DeepCopy()
	servicealloc.DropLoadBalancerStatus(svc)
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return servicealloc.ValidateService(obj.(*corev1.Service))
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return servicealloc.WarningsForService(obj.(*corev1.Service), nil)
}

func (strategy) Canonicalize(obj runtime.Object) {}

func (strategy) AllowCreateOnUpdate(context.Context) bool { return true }

func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return servicealloc.ValidateServiceUpdate(obj.(*corev1.Service), old.(*corev1.Service))
}

func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return servicealloc.WarningsForService(obj.(*corev1.Service), old.(*corev1.Service))
}

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForUpdate keeps the stored spec (a status update cannot write it).
// ipMode is defaulted at decoding only, by the type the request carried, as
// upstream does: a status PUT whose body says ClusterIP gets no default and
// is refused for a LoadBalancer (testdata/parity, status/put-ignores-spec).
func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Spec = *oldSvc.Spec.DeepCopy()
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return servicealloc.ValidateServiceStatusUpdate(obj.(*corev1.Service), old.(*corev1.Service))
}

func (statusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return servicealloc.WarningsForServiceStatus(obj.(*corev1.Service))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// GetAttrs returns the labels and the selectable fields of a Service:
// metadata.name, metadata.namespace, spec.clusterIP and spec.type.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil, fmt.Errorf("not a Service: %T", obj)
	}
	fs := generic.ObjectMetaFieldsSet(&svc.ObjectMeta, true)
	fs["spec.clusterIP"] = svc.Spec.ClusterIP
	fs["spec.type"] = string(svc.Spec.Type)
	return svc.Labels, fs, nil
}
