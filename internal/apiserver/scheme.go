package apiserver

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/allocator/allocator/internal/storageversion"
)

// Scheme holds every type the server serves. The k8s.io/api types are
// registered under both their external version (v1) and
// runtime.APIVersionInternal, so conversion between the two is the identity
// and no internal types have to be written.
var Scheme = runtime.NewScheme()

// Codecs serializes and deserializes objects of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// OpenAPIScheme holds the same types under their external versions only. The
// OpenAPI definition namer uses it so that no "__internal" group-version-kind
// appears in the published x-kubernetes-group-version-kind extensions.
var OpenAPIScheme = runtime.NewScheme()

var (
	coreInternal       = schema.GroupVersion{Group: "", Version: runtime.APIVersionInternal}
	networkingInternal = schema.GroupVersion{Group: networkingv1.GroupName, Version: runtime.APIVersionInternal}
)

// servedTypes are the objects the registries store (and their lists), per group.
func coreTypes() []runtime.Object {
	return []runtime.Object{
		&corev1.Service{}, &corev1.ServiceList{},
		&corev1.Namespace{}, &corev1.NamespaceList{},
		&corev1.Event{}, &corev1.EventList{},
	}
}

func networkingTypes() []runtime.Object {
	return []runtime.Object{
		&networkingv1.IPAddress{}, &networkingv1.IPAddressList{},
		&networkingv1.ServiceCIDR{}, &networkingv1.ServiceCIDRList{},
	}
}

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(networkingv1.AddToScheme(Scheme))
	Scheme.AddKnownTypes(coreInternal, coreTypes()...)
	Scheme.AddKnownTypes(networkingInternal, networkingTypes()...)
	utilruntime.Must(Scheme.SetVersionPriority(corev1.SchemeGroupVersion))
	utilruntime.Must(Scheme.SetVersionPriority(networkingv1.SchemeGroupVersion))
	// kube-apiserver 1.33 stores IPAddress and ServiceCIDR as v1beta1: decode
	// them (converted to v1) so a 1.33 cluster's etcd can be served. Never
	// served and never written.
	utilruntime.Must(storageversion.AddToScheme(Scheme))
	utilruntime.Must(addDefaultingFuncs(Scheme))
	utilruntime.Must(addFieldLabelConversions(Scheme))

	// The generic server needs these option and status types in an unversioned
	// group-version (sample-apiserver does the same).
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})

	utilruntime.Must(corev1.AddToScheme(OpenAPIScheme))
	utilruntime.Must(networkingv1.AddToScheme(OpenAPIScheme))
	metav1.AddToGroupVersion(OpenAPIScheme, schema.GroupVersion{Version: "v1"})
}
