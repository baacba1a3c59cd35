package servicealloc

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// readsAsStored is what ReadsAsStored must say of raw: whether the decoded
// Service is left as it is by the decode's defaults and a's read
// defaulting; ok false when raw does not decode.
func readsAsStored(t *testing.T, a *Allocator, raw []byte) (unchanged, ok bool) {
	t.Helper()
	var decoded corev1.Service
	if err := decoded.Unmarshal(raw); err != nil {
		return false, false
	}
	read := decoded.DeepCopy()
	DefaultService(read)
	a.DefaultOnRead(read)
	return apiequality.Semantic.DeepEqual(&decoded, read), true
}

// defaulted is a ClusterIP Service as a server writes it: every default set.
func defaulted(mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, SessionAffinity: corev1.ServiceAffinityNone,
		ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr(corev1.IPFamilyPolicySingleStack),
		InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
		Ports:                 []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
	}}
	s.Name, s.Namespace = "web", "default"
	for _, m := range mutate {
		m(s)
	}
	return s
}

func TestReadsAsStored(t *testing.T) {
	t.Parallel()
	lb := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		s.Spec.AllocateLoadBalancerNodePorts = ptr(true)
	}
	cases := []struct {
		name   string
		svc    *corev1.Service
		stored bool
	}{
		{"as written", defaulted(), true},
		{"no type", defaulted(func(s *corev1.Service) { s.Spec.Type = "" }), false},
		{"no session affinity", defaulted(func(s *corev1.Service) { s.Spec.SessionAffinity = "" }), false},
		{"no internal traffic policy (written before it existed)", defaulted(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = nil }), false},
		{"no families (written before dual stack)", defaulted(func(s *corev1.Service) { s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = nil, nil }), false},
		{"clusterIP without clusterIPs", defaulted(func(s *corev1.Service) { s.Spec.ClusterIPs = nil }), false},
		{"a port without protocol", defaulted(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "" }), false},
		{"a port without target", defaulted(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.IntOrString{} }), false},
		{"a port whose target is the string \"\"", defaulted(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("") }), false},
		{"a named target port", defaulted(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }), true},
		{"affinity None with a config", defaulted(func(s *corev1.Service) { s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{} }), false},
		{"affinity ClientIP without a timeout", defaulted(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{}}
		}), false},
		{"affinity ClientIP with its timeout", defaulted(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		}), true},
		{"externalIPs without an external policy", defaulted(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }), false},
		{"a load balancer as written", defaulted(lb), true},
		{"a load balancer without allocateLoadBalancerNodePorts", defaulted(lb, func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = nil }), false},
		{"a load balancer's ingress without ipMode", defaulted(lb, func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.9"}}
		}), false},
		{"a load balancer's ingress with ipMode", defaulted(lb, func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.9", IPMode: ptr(corev1.LoadBalancerIPModeVIP)}}
		}), true},
		{"a headless Service as written", defaulted(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		}), true},
		{"a headless Service without families", defaulted(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
			s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = nil, nil
		}), false},
		{"an ExternalName Service as written", &corev1.Service{Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "example.com", SessionAffinity: corev1.ServiceAffinityNone,
		}}, true},
		{"an ExternalName Service with an internal traffic policy", &corev1.Service{Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "example.com", SessionAffinity: corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
		}}, false},
	}
	a, _ := newAlloc(t, "10.0.0.0/24", "fd00::/120")
	for _, tc := range cases {
		raw, err := tc.svc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := readsAsStored(t, a, raw)
		if want != tc.stored {
			t.Fatalf("%s: the case is wrong: the read defaults leave it unchanged: %v", tc.name, want)
		}
		if got := ReadsAsStored(raw); got != tc.stored {
			t.Errorf("%s: ReadsAsStored = %v, want %v", tc.name, got, tc.stored)
		}
	}
}

// choices hands out the fuzzer's bytes as choices, 0 when they run out.
type choices []byte

func (c *choices) pick(n int) int {
	if len(*c) == 0 {
		return 0
	}
	v := int((*c)[0]) % n
	*c = (*c)[1:]
	return v
}

func pickOf[T any](c *choices, values ...T) T { return values[c.pick(len(values))] }

// fuzzService builds a Service from c among the values the read defaults
// look at: each field absent, empty, set, or set to what no default names.
func fuzzService(c *choices) *corev1.Service {
	s := &corev1.Service{}
	sp := &s.Spec
	sp.Type = pickOf(c, corev1.ServiceType(""), corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName, "Other")
	sp.SessionAffinity = pickOf(c, corev1.ServiceAffinity(""), corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP, "Other")
	sp.SessionAffinityConfig = pickOf(c, nil, &corev1.SessionAffinityConfig{},
		&corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{}},
		&corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(30))}})
	sp.ClusterIP = pickOf(c, "", corev1.ClusterIPNone, "10.0.0.1", "fd00::1")
	sp.ClusterIPs = pickOf(c, nil, []string{sp.ClusterIP}, []string{"10.0.0.1", "fd00::1"}, []string{""})
	sp.IPFamilies = pickOf(c, nil, []corev1.IPFamily{corev1.IPv4Protocol}, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol})
	sp.ExternalIPs = pickOf(c, nil, []string{"192.0.2.1"}, []string{""})
	sp.ExternalTrafficPolicy = pickOf(c, corev1.ServiceExternalTrafficPolicy(""), corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)
	sp.InternalTrafficPolicy = pickOf(c, nil, ptr(corev1.ServiceInternalTrafficPolicy("")), ptr(corev1.ServiceInternalTrafficPolicyCluster))
	sp.AllocateLoadBalancerNodePorts = pickOf(c, nil, ptr(false), ptr(true))
	sp.Selector = pickOf(c, nil, map[string]string{"app": "web"})
	for range c.pick(4) {
		sp.Ports = append(sp.Ports, corev1.ServicePort{
			Port:     80,
			Protocol: pickOf(c, corev1.Protocol(""), corev1.ProtocolTCP, corev1.ProtocolUDP),
			TargetPort: pickOf(c, intstr.IntOrString{}, intstr.FromInt32(0), intstr.FromString(""), intstr.FromInt32(8080),
				intstr.FromString("http"), intstr.IntOrString{StrVal: "x"}, intstr.IntOrString{Type: intstr.String, IntVal: 5},
				intstr.IntOrString{Type: 7}),
		})
	}
	for range c.pick(3) {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{
			IP:       pickOf(c, "", "192.0.2.9"),
			Hostname: pickOf(c, "", "lb.example.com"),
			IPMode:   pickOf(c, nil, ptr(corev1.LoadBalancerIPModeVIP), ptr(corev1.LoadBalancerIPMode(""))),
		})
	}
	return s
}

// FuzzReadsAsStored holds ReadsAsStored equal to running the read defaults:
// on Services built from the fuzzer's choices and encoded as a server
// writes them, it must say exactly when they leave the decoded Service
// unchanged.
func FuzzReadsAsStored(f *testing.F) {
	for _, seed := range [][]byte{{}, {1, 1, 0, 1, 1, 1, 1}, {3, 1, 0, 2, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1}, {4, 1}} {
		f.Add(seed)
	}
	a, _ := newAlloc(f, "10.0.0.0/24", "fd00::/120")
	f.Fuzz(func(t *testing.T, b []byte) {
		c := choices(b)
		s := fuzzService(&c)
		raw, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, ok := readsAsStored(t, a, raw)
		if !ok {
			t.Fatalf("a marshalled Service does not decode: %+v", s)
		}
		if got := ReadsAsStored(raw); got != want {
			t.Fatalf("ReadsAsStored = %v, the read defaults leave it unchanged: %v\n%+v", got, want, s.Spec)
		}
	})
}

// FuzzReadsAsStoredBytes gives ReadsAsStored any bytes: when it says they
// read as stored and they decode, the read defaults must leave them
// unchanged (fields repeated, out of order, of other wire types included).
// Bytes that do not decode are not its to judge: their reader fails on them
// either way.
func FuzzReadsAsStoredBytes(f *testing.F) {
	for _, s := range []*corev1.Service{defaulted(), fuzzService(&choices{3, 1, 0, 2, 1, 1, 1, 1, 2, 2, 1, 1})} {
		raw, err := s.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		f.Add(append(raw, raw...)) // every field twice: messages merged, scalars last
	}
	a, _ := newAlloc(f, "10.0.0.0/24", "fd00::/120")
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !ReadsAsStored(raw) {
			return // decoded in full: always safe
		}
		if unchanged, ok := readsAsStored(t, a, raw); ok && !unchanged {
			t.Fatal("ReadsAsStored is true, but the read defaults change the decoded Service")
		}
	})
}
