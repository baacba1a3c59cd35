package holding

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
)

func TestClusterIPs(t *testing.T) {
	t.Parallel()
	addrs := func(texts ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range texts {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		ips     []netip.Addr
		invalid []string
	}{
		{name: "nil Service"},
		{name: "single stack", svc: ipSvc("", "10.0.0.1", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "dual stack, primary first", svc: ipSvc("", "fd00::1", "fd00::1", "10.0.0.1"), ips: addrs("fd00::1", "10.0.0.1")},
		{name: "ExternalName holds nothing", svc: ipSvc(corev1.ServiceTypeExternalName, "10.0.0.1", "10.0.0.1")},
		{name: "headless", svc: ipSvc("", "None", "None")},
		{name: "headless by clusterIP, whatever clusterIPs says", svc: ipSvc("", "None", "10.0.0.1")},
		{name: "None inside clusterIPs is skipped", svc: ipSvc("", "10.0.0.1", "10.0.0.1", "None"), ips: addrs("10.0.0.1")},
		{name: "empty clusterIPs: clusterIP alone", svc: ipSvc("", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "empty clusterIP: clusterIPs", svc: ipSvc("", "", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "clusterIPs win over a different clusterIP", svc: ipSvc("", "10.0.0.9", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "nothing set", svc: ipSvc("", "")},
		{name: "empty entries are skipped", svc: ipSvc("", "", "", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "invalid texts, each once, in order", svc: ipSvc("", "bad", "bad", "10.0.0.1", "also bad", "bad"),
			ips: addrs("10.0.0.1"), invalid: []string{"bad", "also bad"}},
		{name: "zone is invalid", svc: ipSvc("", "", "fe80::1%eth0"), invalid: []string{"fe80::1%eth0"}},
		{name: "leading zeros are invalid", svc: ipSvc("", "", "010.000.000.001"), invalid: []string{"010.000.000.001"}},
		{name: "CIDR is invalid", svc: ipSvc("", "", "10.0.0.0/24"), invalid: []string{"10.0.0.0/24"}},
		{name: "IPv4-mapped is IPv4", svc: ipSvc("", "", "::ffff:10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "one address spelled twice is held once", svc: ipSvc("", "", "::ffff:10.0.0.1", "FD00::0001", "10.0.0.1", "fd00::1"),
			ips: addrs("10.0.0.1", "fd00::1")},
		{name: "NodePort type holds its addresses", svc: ipSvc(corev1.ServiceTypeNodePort, "10.0.0.1", "10.0.0.1"), ips: addrs("10.0.0.1")},
		{name: "LoadBalancer type holds its addresses", svc: ipSvc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", "10.0.0.1"), ips: addrs("10.0.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ips, invalid := ClusterIPs(tc.svc)
			if diff := cmp.Diff(tc.ips, ips, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("ips (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.invalid, invalid, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("invalid (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(ips, IPs(tc.svc), cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("IPs differs from ClusterIPs (-want +got):\n%s", diff)
			}
			// Appended after addresses of other Services, the same ones
			// again among them: only svc's own are deduplicated.
			before := addrs("10.0.0.1", "192.0.2.1")
			appended, _ := AppendClusterIPs(slices.Clone(before), tc.svc)
			if diff := cmp.Diff(append(before, ips...), appended, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("AppendClusterIPs (-want +got):\n%s", diff)
			}
			for _, ip := range ips {
				if got := CanonicalText(ip, tc.svc); got != ip.String() {
					t.Errorf("CanonicalText(%v) = %q", ip, got)
				}
			}
		})
	}
}

func TestNodePorts(t *testing.T) {
	t.Parallel()
	local, cluster := corev1.ServiceExternalTrafficPolicyLocal, corev1.ServiceExternalTrafficPolicyCluster
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []int
	}{
		{name: "nil Service"},
		{name: "NodePort", svc: portSvc(corev1.ServiceTypeNodePort, "", 0, 30002, 30001), want: []int{30001, 30002}},
		{name: "ports without a nodePort", svc: portSvc(corev1.ServiceTypeNodePort, "", 0, 0, 30001, 0), want: []int{30001}},
		{name: "LoadBalancer", svc: portSvc(corev1.ServiceTypeLoadBalancer, cluster, 0, 30001), want: []int{30001}},
		{name: "ClusterIP type with nodePort values", svc: portSvc(corev1.ServiceTypeClusterIP, "", 0, 30001)},
		{name: "ExternalName with nodePort values", svc: portSvc(corev1.ServiceTypeExternalName, "", 0, 30001)},
		{name: "type unset", svc: portSvc("", "", 0, 30001)},
		{name: "health check, LoadBalancer Local", svc: portSvc(corev1.ServiceTypeLoadBalancer, local, 30009, 30001), want: []int{30001, 30009}},
		{name: "health check alone", svc: portSvc(corev1.ServiceTypeLoadBalancer, local, 30009), want: []int{30009}},
		{name: "health check, LoadBalancer Cluster", svc: portSvc(corev1.ServiceTypeLoadBalancer, cluster, 30009, 30001), want: []int{30001}},
		{name: "health check, NodePort Local", svc: portSvc(corev1.ServiceTypeNodePort, local, 30009, 30001), want: []int{30001}},
		{name: "health check, ExternalName", svc: portSvc(corev1.ServiceTypeExternalName, local, 30009)},
		{name: "health check equal to a nodePort: once", svc: portSvc(corev1.ServiceTypeLoadBalancer, local, 30001, 30001), want: []int{30001}},
		{name: "same nodePort twice: once", svc: portSvc(corev1.ServiceTypeNodePort, "", 0, 30001, 30001), want: []int{30001}},
		{name: "out of range values are held", svc: portSvc(corev1.ServiceTypeNodePort, "", 0, 80, -1, 70000), want: []int{-1, 80, 70000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, NodePorts(tc.svc), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("NodePorts (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("TCP and UDP on one nodePort: once", func(t *testing.T) {
		t.Parallel()
		svc := portSvc(corev1.ServiceTypeNodePort, "", 0, 30001, 30001)
		svc.Spec.Ports[1].Protocol = corev1.ProtocolUDP
		if diff := cmp.Diff([]int{30001}, NodePorts(svc)); diff != "" {
			t.Errorf("NodePorts (-want +got):\n%s", diff)
		}
	})
}

// TestHolds: HoldsIP and HoldsNodePort answer what IPs and NodePorts list,
// so the release, the repairs and the checks that ask about one value agree
// with those that read the whole list.
func TestHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		ip   string
		want bool
	}{
		{"nil Service", nil, "10.0.0.1", false},
		{"its address", ipSvc("", "10.0.0.1", "10.0.0.1"), "10.0.0.1", true},
		{"its secondary address", ipSvc("", "10.0.0.1", "10.0.0.1", "fd00::1"), "fd00::1", true},
		{"another address", ipSvc("", "10.0.0.1", "10.0.0.1"), "10.0.0.2", false},
		{"clusterIP alone, clusterIPs empty", ipSvc("", "10.0.0.1"), "10.0.0.1", true},
		{"stored IPv4-mapped: held as its IPv4 address", ipSvc("", "", "::ffff:10.0.0.1"), "10.0.0.1", true},
		{"stored IPv4-mapped: not as the mapped address", ipSvc("", "", "::ffff:10.0.0.1"), "::ffff:10.0.0.1", false},
		{"non-canonical IPv6 text", ipSvc("", "", "FD00::0001"), "fd00::1", true},
		{"ExternalName holds nothing", ipSvc(corev1.ServiceTypeExternalName, "10.0.0.1", "10.0.0.1"), "10.0.0.1", false},
		{"headless holds nothing", ipSvc("", "None", "10.0.0.1"), "10.0.0.1", false},
	} {
		t.Run("ip/"+tc.name, func(t *testing.T) {
			t.Parallel()
			ip := netip.MustParseAddr(tc.ip)
			if got := HoldsIP(tc.svc, ip); got != tc.want {
				t.Errorf("HoldsIP(%s) = %v, want %v", ip, got, tc.want)
			}
			if got, list := HoldsIP(tc.svc, ip), slices.Contains(IPs(tc.svc), ip); got != list {
				t.Errorf("HoldsIP(%s) = %v, but IPs lists it: %v", ip, got, list)
			}
		})
	}
	lb := corev1.ServiceTypeLoadBalancer
	local, cluster := corev1.ServiceExternalTrafficPolicyLocal, corev1.ServiceExternalTrafficPolicyCluster
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		port int
		want bool
	}{
		{"nil Service", nil, 30000, false},
		{"its nodePort", portSvc(corev1.ServiceTypeNodePort, cluster, 0, 30000, 30001), 30001, true},
		{"another port", portSvc(corev1.ServiceTypeNodePort, cluster, 0, 30000), 30001, false},
		{"nodePort of a ClusterIP Service", portSvc(corev1.ServiceTypeClusterIP, cluster, 0, 30000), 30000, false},
		{"healthCheckNodePort, LoadBalancer Local", portSvc(lb, local, 30005, 30000), 30005, true},
		{"healthCheckNodePort, LoadBalancer Cluster", portSvc(lb, cluster, 30005, 30000), 30005, false},
		{"port 0 is never held", portSvc(corev1.ServiceTypeNodePort, cluster, 0, 0), 0, false},
	} {
		t.Run("nodeport/"+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := HoldsNodePort(tc.svc, tc.port); got != tc.want {
				t.Errorf("HoldsNodePort(%d) = %v, want %v", tc.port, got, tc.want)
			}
		})
	}
}

// FuzzParseClusterIP: an address read is valid, zoneless and unmapped, and
// reads back from its canonical text as itself.
func FuzzParseClusterIP(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "fd00::1", "::ffff:10.0.0.1", "fe80::1%eth0", "010.0.0.1", "None", "", "1.2.3.4.5", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		ip, ok := ParseClusterIP(text)
		if !ok {
			if ip.IsValid() {
				t.Fatalf("ParseClusterIP(%q) failed with a valid address %v", text, ip)
			}
			return
		}
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			t.Fatalf("ParseClusterIP(%q) = %v", text, ip)
		}
		if again, ok := ParseClusterIP(ip.String()); !ok || again != ip {
			t.Fatalf("ParseClusterIP(%q) = %v, but its text reads as %v, %v", text, ip, again, ok)
		}
	})
}

// FuzzClusterIPs: every address held is what ParseClusterIP reads from one
// of the fields, every invalid text is one of them, and nothing repeats.
func FuzzClusterIPs(f *testing.F) {
	f.Add("10.0.0.1", "10.0.0.1", "fd00::1", false)
	f.Add("None", "", "bad", true)
	f.Fuzz(func(t *testing.T, clusterIP, first, second string, externalName bool) {
		svc := ipSvc("", clusterIP, first, second)
		if externalName {
			svc.Spec.Type = corev1.ServiceTypeExternalName
		}
		ips, invalid := ClusterIPs(svc)
		if externalName || clusterIP == corev1.ClusterIPNone {
			if len(ips)+len(invalid) != 0 {
				t.Fatalf("ClusterIPs(%+v) = %v, %q; want nothing", svc.Spec, ips, invalid)
			}
			return
		}
		fields := append([]string{clusterIP}, first, second)
		for _, ip := range ips {
			if !slices.ContainsFunc(fields, func(s string) bool { a, ok := ParseClusterIP(s); return ok && a == ip }) {
				t.Fatalf("ClusterIPs(%+v) holds %v, which no field names", svc.Spec, ip)
			}
		}
		for _, s := range invalid {
			if _, ok := ParseClusterIP(s); ok || s == "" || s == corev1.ClusterIPNone || !slices.Contains(fields, s) {
				t.Fatalf("ClusterIPs(%+v) reports %q invalid", svc.Spec, s)
			}
		}
		for _, ip := range ips {
			if got := CanonicalText(ip, svc); got != ip.String() {
				t.Fatalf("CanonicalText(%v, %+v) = %q", ip, svc.Spec, got)
			}
		}
		if len(slices.Compact(slices.SortedFunc(slices.Values(ips), netip.Addr.Compare))) != len(ips) {
			t.Fatalf("ClusterIPs(%+v) repeats an address: %v", svc.Spec, ips)
		}
		if len(slices.Compact(slices.Sorted(slices.Values(invalid)))) != len(invalid) {
			t.Fatalf("ClusterIPs(%+v) repeats a text: %q", svc.Spec, invalid)
		}
	})
}

// TestCanonicalTextAllocs: the text of an address a Service spells
// canonically is the Service's own; another spelling costs one text.
func TestCanonicalTextAllocs(t *testing.T) {
	svc := ipSvc("", "10.96.0.10", "10.96.0.10", "fd00::a")
	for _, tc := range []struct {
		ip     string
		allocs float64
	}{{"10.96.0.10", 0}, {"fd00::a", 0}, {"10.96.0.11", 1}} {
		ip := netip.MustParseAddr(tc.ip)
		if got := testing.AllocsPerRun(100, func() { _ = CanonicalText(ip, svc) }); got != tc.allocs {
			t.Errorf("CanonicalText(%s): %v allocations, want %v", tc.ip, got, tc.allocs)
		}
	}
	upper := ipSvc("", "FD00::A", "FD00::A")
	if got := CanonicalText(netip.MustParseAddr("fd00::a"), upper); got != "fd00::a" {
		t.Errorf("CanonicalText of an upper-case spelling = %q, want fd00::a", got)
	}
}

func ipSvc(typ corev1.ServiceType, clusterIP string, clusterIPs ...string) *corev1.Service {
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP, ClusterIPs: clusterIPs}}
}

func portSvc(typ corev1.ServiceType, policy corev1.ServiceExternalTrafficPolicy, healthCheck int32, nodePorts ...int32) *corev1.Service {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, ExternalTrafficPolicy: policy, HealthCheckNodePort: healthCheck}}
	for i, p := range nodePorts {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: int32(80 + i), NodePort: p, Protocol: corev1.ProtocolTCP})
	}
	return svc
}
