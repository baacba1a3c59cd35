package slim

import (
	"errors"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/mutate"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
)

var created = metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

// storedSeeds are stored values of the shapes the walk and the full decode
// must agree on: what the API server writes, and Services that leave the
// defaulted fields unset.
func storedSeeds(t testing.TB) (services, ipAddresses [][]byte) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "allocator", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: &created, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "3f1d6c0a-8e2b-4b7e-a1c4-5d9e0f2a6b31",
			CreationTimestamp: created, Labels: map[string]string{"team": "a"}, ManagedFields: managed,
			Annotations: map[string]string{"note": "x"}, Finalizers: []string{"f"}}
	}
	svcs := []runtime.Object{
		&corev1.Service{ObjectMeta: meta("web"), Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::a"},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
				{Name: "metrics", Port: 9090},
			},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 30999,
			Selector: map[string]string{"app": "web"},
		}},
		// Left unset, as only a hand-written value leaves them: the type,
		// a node port's protocol, the traffic policy of a reachable Service.
		&corev1.Service{ObjectMeta: meta("unset"), Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.11",
			ExternalIPs: []string{"192.0.2.1"}, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30081}}}},
		&corev1.Service{ObjectMeta: meta("nodeport"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			ClusterIP: "10.96.0.12", ClusterIPs: []string{"10.96.0.12"}, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30082}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "shop"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: "shop"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
	}
	ipa := func(addr string, family string) *networkingv1.IPAddress {
		o := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addr, UID: "7c1e2d3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
			CreationTimestamp: created, ManagedFields: managed,
			Labels: map[string]string{ipaddress.LabelIPFamily: family, ipaddress.LabelManagedBy: ipaddress.ManagedBy}},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "shop", Name: "web"}}}
		return o
	}
	foreign := ipa("10.96.0.99", "IPv4")
	foreign.Labels = map[string]string{"owner": "someone"}
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "u"}}
	foreign.Spec.ParentRef = &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "shop", Name: "gw"}
	ours := ipa("10.96.0.11", "IPv4") // as this allocator writes it: the Service's UID recorded
	ours.Annotations = map[string]string{ipaddress.AnnotationServiceUID: "0b6f1c2e-5d4a-4f3b-9c8d-7e6f5a4b3c2d", "note": "kept"}
	ips := []runtime.Object{ipa("10.96.0.10", "IPv4"), ipa("fd00::a", "IPv6"), foreign, ours}
	encode := func(objs []runtime.Object) [][]byte {
		var out [][]byte
		for _, o := range objs {
			data, err := etcdlayout.Encode(o)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
		return out
	}
	return encode(svcs), encode(ips)
}

// checkStored: whenever the full decode decodes data, the stored decode
// gives the same (both paths one answer); when the full decode refuses,
// the stored decode refuses too or gives what the walk read.
func checkStored[T any](t *testing.T, data []byte, stored, full func([]byte) (T, error)) {
	t.Helper()
	want, wantErr := full(data)
	got, err := stored(data)
	if wantErr != nil {
		return
	}
	if err != nil {
		t.Fatalf("%q: %v, want what the full decode gives", data, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%q (-full +stored):\n%s", data, diff)
	}
}

// TestStored: StoredService and StoredIPAddress give, for every stored
// shape, what the full decode gives once made slim and compact, reading
// the protobuf themselves (the walk); an allocator's IPAddress gets its
// family's shared labels; a value encrypted at rest or not an object is an
// error, from the full decode.
func TestStored(t *testing.T) {
	t.Parallel()
	services, ipAddresses := storedSeeds(t)
	for _, data := range services {
		checkStored(t, data, StoredService, fullService)
		raw, ok := Envelope(data, etcdlayout.KindService)
		if _, err := DecodeService(raw); !ok || err != nil {
			t.Errorf("%q: the walk did not read a Service the API server wrote (%v)", data, err)
		}
	}
	for _, data := range ipAddresses {
		checkStored(t, data, StoredIPAddress, fullIPAddress)
	}
	unset, err := StoredService(services[1])
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.11",
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
		Ports:                 []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, NodePort: 30081}}}
	if diff := cmp.Diff(want, unset.Spec); diff != "" {
		t.Errorf("a Service leaving its defaults unset (-want +got):\n%s", diff)
	}
	v4, err := StoredIPAddress(ipAddresses[0])
	if err != nil || v4.ManagedFields != nil || !sameMap(v4.Labels, SharedLabels("IPv4")) {
		t.Errorf("an allocator's IPv4 IPAddress: %v, managedFields %v, labels shared: %v", err, v4.ManagedFields, sameMap(v4.Labels, SharedLabels("IPv4")))
	}
	// The Service UID is not kept; another annotation is.
	ours, err := StoredIPAddress(ipAddresses[3])
	if err != nil || !maps.Equal(ours.Annotations, map[string]string{"note": "kept"}) {
		t.Errorf("an IPAddress recording its Service's UID: %v, annotations %v, want only note=kept", err, ours.Annotations)
	}
	uidOnly := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.12",
		Annotations: map[string]string{ipaddress.AnnotationServiceUID: "0b6f1c2e-5d4a-4f3b-9c8d-7e6f5a4b3c2d"}}}
	data, err := etcdlayout.Encode(uidOnly)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := StoredIPAddress(data); err != nil || got.Annotations != nil {
		t.Errorf("an IPAddress with the Service UID its only annotation: %v, annotations %#v, want none", err, got.Annotations)
	}
	if _, err := StoredService([]byte("k8s:enc:aescbc:v1:key1:...")); !errors.Is(err, etcdlayout.ErrEncrypted) {
		t.Errorf("a Service encrypted at rest: %v, want %v", err, etcdlayout.ErrEncrypted)
	}
	for _, bad := range [][]byte{nil, []byte("not an object"), ipAddresses[0]} {
		if svc, err := StoredService(bad); err == nil {
			t.Errorf("%q: decoded as a Service %v, want an error", bad, svc)
		}
	}
	if ipa, err := StoredIPAddress(services[0]); err == nil {
		t.Errorf("a Service decoded as an IPAddress %v, want an error", ipa)
	}
}

// TestStoredMutated checks checkStored on 20,000 mutations of each kind's
// stored values (bytes changed, dropped, inserted), the same on every run.
func TestStoredMutated(t *testing.T) {
	t.Parallel()
	services, ipAddresses := storedSeeds(t)
	r := rand.New(rand.NewPCG(11, 12))
	for range 20_000 {
		checkStored(t, mutate.Bytes(r, services), StoredService, fullService)
		checkStored(t, mutate.Bytes(r, ipAddresses), StoredIPAddress, fullIPAddress)
	}
}

func FuzzStoredService(f *testing.F) {
	services, _ := storedSeeds(f)
	for _, s := range services {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkStored(t, data, StoredService, fullService) })
}

func FuzzStoredIPAddress(f *testing.F) {
	_, ipAddresses := storedSeeds(f)
	for _, s := range ipAddresses {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkStored(t, data, StoredIPAddress, fullIPAddress) })
}

// sameMap reports whether a and b are one map.
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
