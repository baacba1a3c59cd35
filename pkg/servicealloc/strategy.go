package servicealloc

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Strategy is the create, update and delete behaviour of core/v1 Services
// (the spec), as kube-apiserver's: a spec write never writes status,
// validation is ValidateService and ValidateServiceUpdate with upstream's
// messages, and a PUT of a Service that does not exist creates it. The
// checks that need the cluster's ranges run later, in the store hooks
// NewREST installs. Serve it as a genericregistry.Store's CreateStrategy,
// UpdateStrategy, DeleteStrategy and ResetFieldsStrategy.
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// StatusStrategy is the behaviour of the status subresource: a status write
// never writes the spec.
type StatusStrategy struct{ Strategy }

// NewStrategies returns the strategies of Services and of their status,
// typing objects with typer.
func NewStrategies(typer runtime.ObjectTyper) (Strategy, StatusStrategy) {
	s := Strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
	return s, StatusStrategy{s}
}

var (
	_ rest.RESTCreateStrategy  = Strategy{}
	_ rest.RESTUpdateStrategy  = Strategy{}
	_ rest.RESTDeleteStrategy  = Strategy{}
	_ rest.ResetFieldsStrategy = Strategy{}
	_ rest.RESTUpdateStrategy  = StatusStrategy{}
	_ rest.ResetFieldsStrategy = StatusStrategy{}
)

// NamespaceScoped is true: Services live in namespaces.
func (Strategy) NamespaceScoped() bool { return true }

// PrepareForCreate clears status: a create writes the spec only.
func (Strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*corev1.Service).Status = corev1.ServiceStatus{}
}

// PrepareForUpdate keeps the stored status (a spec update cannot write it),
// except that a Service that stops being a LoadBalancer loses its
// load-balancer status, as upstream.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = *oldSvc.Status.DeepCopy()
	DropLoadBalancerStatus(svc)
}

// Validate is ValidateService.
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return ValidateService(obj.(*corev1.Service))
}

// WarningsOnCreate is WarningsForService of a new Service.
func (Strategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	return WarningsForService(obj.(*corev1.Service), nil)
}

// Canonicalize changes nothing.
func (Strategy) Canonicalize(runtime.Object) {}

// AllowCreateOnUpdate is true, as upstream: a PUT (or a server-side apply)
// of a Service that does not exist creates it.
func (Strategy) AllowCreateOnUpdate(context.Context) bool { return true }

// AllowUnconditionalUpdate is true: an update need not name a
// resourceVersion.
func (Strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// ValidateUpdate is ValidateServiceUpdate.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return ValidateServiceUpdate(obj.(*corev1.Service), old.(*corev1.Service))
}

// WarningsOnUpdate is WarningsForService of the updated Service.
func (Strategy) WarningsOnUpdate(_ context.Context, obj, old runtime.Object) []string {
	return WarningsForService(obj.(*corev1.Service), old.(*corev1.Service))
}

// GetResetFields names status: server-side apply of the spec leaves it.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForUpdate keeps the stored spec (a status update cannot write it).
// ipMode is defaulted at decoding only, by the type the request carried, as
// upstream does: a status PUT whose body says ClusterIP gets no default and
// is refused for a LoadBalancer (testdata/parity, status/put-ignores-spec).
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Spec = *oldSvc.Spec.DeepCopy()
}

// ValidateUpdate is ValidateServiceStatusUpdate.
func (StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return ValidateServiceStatusUpdate(obj.(*corev1.Service), old.(*corev1.Service))
}

// WarningsOnUpdate is WarningsForServiceStatus.
func (StatusStrategy) WarningsOnUpdate(_ context.Context, obj, _ runtime.Object) []string {
	return WarningsForServiceStatus(obj.(*corev1.Service))
}

// GetResetFields names spec: server-side apply of status leaves it.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}
