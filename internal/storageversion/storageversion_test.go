package storageversion

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// sameShape reports the first difference between two struct types' fields
// (names, JSON and protobuf tags, kinds), following the fields whose types
// are defined in the compared packages. Types from elsewhere (metav1) must
// be identical.
func sameShape(t *testing.T, path string, a, b reflect.Type) {
	t.Helper()
	if a == b {
		return
	}
	if a.Kind() != b.Kind() {
		t.Errorf("%s: kind %s vs %s", path, a.Kind(), b.Kind())
		return
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Slice:
		sameShape(t, path+"[]", a.Elem(), b.Elem())
	case reflect.Struct:
		if a.PkgPath() == b.PkgPath() {
			t.Errorf("%s: different types %s and %s from one package", path, a, b)
			return
		}
		if a.NumField() != b.NumField() {
			t.Errorf("%s: %d fields vs %d", path, a.NumField(), b.NumField())
			return
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") || fa.Tag.Get("protobuf") != fb.Tag.Get("protobuf") {
				t.Errorf("%s: field %d is %s %q vs %s %q", path, i, fa.Name, fa.Tag, fb.Name, fb.Tag)
				continue
			}
			sameShape(t, path+"."+fa.Name, fa.Type, fb.Type)
		}
	default:
		t.Errorf("%s: %s vs %s", path, a, b)
	}
}

// TestShapesMatch fails when k8s.io/api gives v1 or v1beta1 a field the
// other lacks: the hand-written conversion would then drop it.
func TestShapesMatch(t *testing.T) {
	t.Parallel()
	sameShape(t, "IPAddress", reflect.TypeFor[networkingv1beta1.IPAddress](), reflect.TypeFor[networkingv1.IPAddress]())
	sameShape(t, "ServiceCIDR", reflect.TypeFor[networkingv1beta1.ServiceCIDR](), reflect.TypeFor[networkingv1.ServiceCIDR]())
}

func full() (*networkingv1beta1.IPAddress, *networkingv1beta1.ServiceCIDR) {
	meta := metav1.ObjectMeta{
		Name: "x", UID: "u-1", ResourceVersion: "7", Generation: 2,
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0)),
		Labels:            map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		Finalizers: []string{"networking.k8s.io/service-cidr-finalizer"},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "kube-apiserver", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "networking.k8s.io/v1beta1", FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`),
		}},
	}
	ip := &networkingv1beta1.IPAddress{ObjectMeta: *meta.DeepCopy(), Spec: networkingv1beta1.IPAddressSpec{
		ParentRef: &networkingv1beta1.ParentReference{Group: "g", Resource: "services", Namespace: "ns", Name: "n"},
	}}
	sc := &networkingv1beta1.ServiceCIDR{ObjectMeta: *meta.DeepCopy(),
		Spec: networkingv1beta1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "fd00::/108"}},
		Status: networkingv1beta1.ServiceCIDRStatus{Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 2,
			LastTransitionTime: metav1.NewTime(time.Unix(1700000001, 0)), Reason: "R", Message: "m",
		}}},
	}
	return ip, sc
}

// TestRoundTrip converts a fully set v1beta1 object to v1 and back through a
// scheme and expects it unchanged, and the v1 object to hold every value.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	if err := networkingv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ip, sc := full()

	var ip1 networkingv1.IPAddress
	if err := s.Convert(ip, &ip1, nil); err != nil {
		t.Fatalf("IPAddress to v1: %v", err)
	}
	if ip1.Spec.ParentRef == nil || *ip1.Spec.ParentRef != (networkingv1.ParentReference{Group: "g", Resource: "services", Namespace: "ns", Name: "n"}) {
		t.Errorf("v1 parentRef %+v", ip1.Spec.ParentRef)
	}
	var ipBack networkingv1beta1.IPAddress
	if err := s.Convert(&ip1, &ipBack, nil); err != nil {
		t.Fatalf("IPAddress to v1beta1: %v", err)
	}
	if diff := cmp.Diff(ip, &ipBack); diff != "" {
		t.Errorf("IPAddress round trip (-want +got):\n%s", diff)
	}

	var sc1 networkingv1.ServiceCIDR
	if err := s.Convert(sc, &sc1, nil); err != nil {
		t.Fatalf("ServiceCIDR to v1: %v", err)
	}
	var scBack networkingv1beta1.ServiceCIDR
	if err := s.Convert(&sc1, &scBack, nil); err != nil {
		t.Fatalf("ServiceCIDR to v1beta1: %v", err)
	}
	if diff := cmp.Diff(sc, &scBack); diff != "" {
		t.Errorf("ServiceCIDR round trip (-want +got):\n%s", diff)
	}
	// Deep copies: changing the result leaves the source alone.
	sc1.Spec.CIDRs[0] = "changed"
	sc1.Status.Conditions[0].Reason = "changed"
	if sc.Spec.CIDRs[0] != "10.96.0.0/16" || sc.Status.Conditions[0].Reason != "R" {
		t.Error("conversion shares memory with its input")
	}

	// The lists convert item by item.
	var list networkingv1.IPAddressList
	in := &networkingv1beta1.IPAddressList{Items: []networkingv1beta1.IPAddress{*ip}}
	if err := s.Convert(in, &list, nil); err != nil || len(list.Items) != 1 || list.Items[0].Spec.ParentRef.Name != "n" {
		t.Errorf("IPAddressList: %v %+v", err, list.Items)
	}
}
