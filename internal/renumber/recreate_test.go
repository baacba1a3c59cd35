package renumber

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var drained = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00:1::/112")}

func svc(ns, name string, typ corev1.ServiceType, ips ...string) corev1.Service {
	s := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7", Generation: 2,
			CreationTimestamp: metav1.Now(), ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 30080}}},
	}
	if len(ips) > 0 {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
	}
	return s
}

func TestSelect(t *testing.T) {
	t.Parallel()
	headless := svc("a", "headless", corev1.ServiceTypeClusterIP, "None")
	external := svc("a", "ext", corev1.ServiceTypeExternalName)
	legacy := svc("a", "legacy", corev1.ServiceTypeClusterIP)
	legacy.Spec.ClusterIP = "10.1.0.9" // only the singular field, as old objects have it
	services := []corev1.Service{
		svc("b", "v4", corev1.ServiceTypeClusterIP, "10.1.0.5"),
		svc("a", "outside", corev1.ServiceTypeClusterIP, "10.96.0.5"),
		svc("a", "dual", corev1.ServiceTypeClusterIP, "10.1.0.6", "fd00:96::6"),
		svc("a", "dual6", corev1.ServiceTypeClusterIP, "fd00:96::7", "10.96.0.7"),
		svc("a", "v6", corev1.ServiceTypeClusterIP, "fd00:1::8"),
		headless, external, legacy,
	}
	type got struct {
		Key         string
		Moved, Kept []netip.Addr
	}
	var out []got
	for _, c := range Select(services, drained) {
		out = append(out, got{c.Key(), c.Moved, c.Kept})
	}
	a := netip.MustParseAddr
	want := []got{
		{"a/dual", []netip.Addr{a("10.1.0.6")}, []netip.Addr{a("fd00:96::6")}},
		{"a/legacy", []netip.Addr{a("10.1.0.9")}, nil},
		{"a/v6", []netip.Addr{a("fd00:1::8")}, nil},
		{"b/v4", []netip.Addr{a("10.1.0.5")}, nil},
	}
	if diff := cmp.Diff(want, out, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("Select (-want +got):\n%s", diff)
	}
}

func TestRefusal(t *testing.T) {
	t.Parallel()
	kube := svc("default", "kubernetes", corev1.ServiceTypeClusterIP, "10.1.0.1")
	fin := svc("a", "fin", corev1.ServiceTypeLoadBalancer, "10.1.0.2")
	fin.Finalizers = []string{"service.kubernetes.io/load-balancer-cleanup"}
	deleting := svc("a", "deleting", corev1.ServiceTypeClusterIP, "10.1.0.3")
	deleting.DeletionTimestamp = &metav1.Time{}
	plain := svc("a", "plain", corev1.ServiceTypeClusterIP, "10.1.0.4")
	for _, tc := range []struct {
		svc  corev1.Service
		want string
	}{
		{kube, "the API server's own Service"},
		{fin, "has finalizers service.kubernetes.io/load-balancer-cleanup"},
		{deleting, "being deleted"},
		{plain, ""},
	} {
		got := Refusal(&tc.svc)
		if (tc.want == "") != (got == "") || len(got) < len(tc.want) || got[:len(tc.want)] != tc.want {
			t.Errorf("Refusal(%s) = %q, want it to start with %q", tc.svc.Name, got, tc.want)
		}
	}
}

// TestRecreate: what the re-create object keeps and clears, per case of
// moved and kept families and pins.
func TestRecreate(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	tests := []struct {
		name    string
		svc     corev1.Service
		pins    Pins
		wantIPs []string
		wantErr error
		primary bool // NeedsPrimaryPin
	}{
		{name: "single moved, server picks", svc: svc("a", "s", corev1.ServiceTypeClusterIP, "10.1.0.5")},
		{name: "single moved, pinned", svc: svc("a", "s", corev1.ServiceTypeClusterIP, "10.1.0.5"),
			pins: Pins{false: a("10.2.0.9")}, wantIPs: []string{"10.2.0.9"}},
		{name: "primary kept, secondary moved", svc: svc("a", "d", corev1.ServiceTypeClusterIP, "fd00:96::6", "10.1.0.6"),
			wantIPs: []string{"fd00:96::6"}},
		{name: "primary moved, secondary kept, unpinned", svc: svc("a", "d", corev1.ServiceTypeClusterIP, "10.1.0.6", "fd00:96::6"),
			wantErr: ErrPrimaryUnpinned, primary: true},
		{name: "primary moved, secondary kept, pinned", svc: svc("a", "d", corev1.ServiceTypeClusterIP, "10.1.0.6", "fd00:96::6"),
			pins: Pins{false: a("10.96.0.9")}, wantIPs: []string{"10.96.0.9", "fd00:96::6"}, primary: true},
		{name: "both moved", svc: svc("a", "d", corev1.ServiceTypeClusterIP, "10.1.0.6", "fd00:1::6")},
		{name: "both moved, only the secondary pinned", svc: svc("a", "d", corev1.ServiceTypeClusterIP, "10.1.0.6", "fd00:1::6"),
			pins: Pins{true: a("fd00:2::1")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.svc.Labels = map[string]string{"app": "x"}
			tc.svc.Annotations = map[string]string{"note": "y"}
			tc.svc.Finalizers = []string{"example.com/f"}
			tc.svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "o"}}
			tc.svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
			c := Select([]corev1.Service{tc.svc}, drained)[0]
			if got := NeedsPrimaryPin(c); got != tc.primary {
				t.Errorf("NeedsPrimaryPin = %v, want %v", got, tc.primary)
			}
			rec, err := Recreate(c, tc.pins)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Recreate error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			want := tc.svc.DeepCopy()
			want.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
			want.UID, want.ResourceVersion, want.Generation, want.CreationTimestamp, want.ManagedFields = "", "", 0, metav1.Time{}, nil
			want.Status = corev1.ServiceStatus{}
			want.Spec.ClusterIP, want.Spec.ClusterIPs = "", tc.wantIPs
			if len(tc.wantIPs) > 0 {
				want.Spec.ClusterIP = tc.wantIPs[0]
			}
			if diff := cmp.Diff(want, rec); diff != "" {
				t.Errorf("Recreate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProbe: the dry-run probe asks for the moved families only, pinned
// ones statically, under a generated name, with no node port of its own.
func TestProbe(t *testing.T) {
	t.Parallel()
	s := svc("a", "d", corev1.ServiceTypeNodePort, "fd00:96::6", "10.1.0.6")
	s.Labels = map[string]string{"app": "x"}
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	dual := corev1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &dual
	c := Select([]corev1.Service{s}, drained)[0]
	for _, tc := range []struct {
		pins    Pins
		wantIPs []string
	}{{nil, nil}, {Pins{false: netip.MustParseAddr("10.2.0.1")}, []string{"10.2.0.1"}}} {
		p := Probe(c, tc.pins)
		if p.Name != "" || p.GenerateName != ProbeName || p.Namespace != "a" || p.Labels["app"] != "x" {
			t.Errorf("probe metadata %+v", p.ObjectMeta)
		}
		if diff := cmp.Diff([]corev1.IPFamily{corev1.IPv4Protocol}, p.Spec.IPFamilies); diff != "" {
			t.Errorf("probe families (-want +got):\n%s", diff)
		}
		if *p.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack || p.Spec.Ports[0].NodePort != 0 {
			t.Errorf("probe policy %s, nodePort %d; want SingleStack and 0", *p.Spec.IPFamilyPolicy, p.Spec.Ports[0].NodePort)
		}
		if diff := cmp.Diff(tc.wantIPs, p.Spec.ClusterIPs); diff != "" {
			t.Errorf("probe clusterIPs with pins %v (-want +got):\n%s", tc.pins, diff)
		}
	}
	if s.Spec.Ports[0].NodePort != 30080 || len(s.Spec.IPFamilies) != 2 {
		t.Errorf("Probe changed the Service it was built from")
	}
}

// TestWithoutKept: the last resort drops kept addresses and node ports,
// keeping pins that precede every kept address.
func TestWithoutKept(t *testing.T) {
	t.Parallel()
	s := svc("a", "d", corev1.ServiceTypeNodePort, "10.1.0.6", "fd00:96::6")
	c := Select([]corev1.Service{s}, drained)[0]
	rec, err := Recreate(c, Pins{false: netip.MustParseAddr("10.2.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	got := WithoutKept(c, rec)
	if diff := cmp.Diff([]string{"10.2.0.1"}, got.Spec.ClusterIPs); diff != "" || got.Spec.ClusterIP != "10.2.0.1" || got.Spec.Ports[0].NodePort != 0 {
		t.Errorf("WithoutKept: clusterIP %q clusterIPs %v nodePort %d (%s)", got.Spec.ClusterIP, got.Spec.ClusterIPs, got.Spec.Ports[0].NodePort, diff)
	}
	if rec.Spec.Ports[0].NodePort != 30080 {
		t.Errorf("WithoutKept changed its input")
	}
}

func TestKeptChanges(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	old := svc("a", "np", corev1.ServiceTypeLoadBalancer, "10.1.0.5", "fd00:96::5")
	old.Spec.Ports = append(old.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053})
	old.Spec.Ports[0].Protocol = corev1.ProtocolTCP
	old.Spec.HealthCheckNodePort = 32000
	c := Candidate{Service: &old, Moved: []netip.Addr{a("10.1.0.5")}, Kept: []netip.Addr{a("fd00:96::5")}}
	created := func(edit func(*corev1.Service)) *corev1.Service {
		s := old.DeepCopy()
		s.Spec.ClusterIPs = []string{"10.96.0.9", "fd00:96::5"}
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		edit(s)
		return s
	}
	tests := []struct {
		name    string
		created *corev1.Service
		want    []string
	}{
		{"all kept", created(func(*corev1.Service) {}), nil},
		{"ports reordered, all kept", created(func(s *corev1.Service) {
			s.Spec.Ports[0], s.Spec.Ports[1] = s.Spec.Ports[1], s.Spec.Ports[0]
		}), nil},
		{"one node port taken", created(func(s *corev1.Service) { s.Spec.Ports[1].NodePort = 31234 }),
			[]string{"node port 30053 of port 53/UDP is now 31234"}},
		{"health-check node port taken", created(func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 32111 }),
			[]string{"health-check node port 32000 is now 32111"}},
		{"kept address taken", created(func(s *corev1.Service) { s.Spec.ClusterIPs[1] = "fd00:96::9" }),
			[]string{"kept address fd00:96::5 is now fd00:96::9"}},
		{"everything dropped", created(func(s *corev1.Service) {
			s.Spec.Ports = s.Spec.Ports[:1]
			s.Spec.Ports[0].NodePort = 31000
			s.Spec.HealthCheckNodePort = 0
			s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
		}), []string{
			"node port 30080 of port 80/TCP is now 31000",
			"node port 30053 of port 53/UDP is now none",
			"health-check node port 32000 is now none",
			"kept address fd00:96::5 is now gone",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, KeptChanges(c, tc.created)); diff != "" {
				t.Errorf("KeptChanges (-want +got):\n%s", diff)
			}
		})
	}
}
