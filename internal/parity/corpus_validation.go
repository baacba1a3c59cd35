package parity

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// validationCases create Services with one field right or wrong at a time.
func validationCases(f Family) []Case {
	lb, np := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort
	str := func(v string) *string { return &v }
	i32 := func(v int32) *int32 { return &v }
	type c struct {
		name string
		s    *corev1.Service
	}
	cs := []c{
		// names
		{"name/upper-case", svc("Upper")},
		{"name/dot", svc("a.b")},
		{"name/63", svc(strings.Repeat("a", 63))},
		{"name/64", svc(strings.Repeat("a", 64))},
		{"name/leading-dash", svc("-a")},
		{"name/digits-only", svc("123")},
		// ports
		{"ports/none", svc("v", ports())},
		{"ports/none-headless", svc("v", headless(), ports())},
		{"ports/none-headless-selectorless", svc("v", headless(), noSelector(), ports())},
		{"ports/zero", svc("v", ports(corev1.ServicePort{Name: "a", Port: 0}))},
		{"ports/65536", svc("v", ports(corev1.ServicePort{Name: "a", Port: 65536}))},
		{"ports/protocol-icmp", svc("v", ports(corev1.ServicePort{Name: "a", Port: 80, Protocol: "ICMP"}))},
		{"ports/protocol-sctp", svc("v", ports(corev1.ServicePort{Name: "a", Port: 80, Protocol: corev1.ProtocolSCTP}))},
		{"ports/unnamed-two", svc("v", ports(corev1.ServicePort{Port: 80}, corev1.ServicePort{Port: 81}))},
		{"ports/unnamed-one", svc("v", ports(corev1.ServicePort{Port: 80}))},
		{"ports/duplicate-names", svc("v", ports(corev1.ServicePort{Name: "a", Port: 80}, corev1.ServicePort{Name: "a", Port: 81}))},
		{"ports/duplicate-port-protocol", svc("v", ports(corev1.ServicePort{Name: "a", Port: 80}, corev1.ServicePort{Name: "b", Port: 80}))},
		{"ports/same-port-two-protocols", svc("v", ports(tcpPort("a", 53, 0), udpPort("b", 53, 0)))},
		{"ports/upper-case-name", svc("v", ports(corev1.ServicePort{Name: "HTTP", Port: 80}))},
		{"ports/long-name", svc("v", ports(corev1.ServicePort{Name: strings.Repeat("a", 64), Port: 80}))},
		{"ports/targetPort-name", svc("v", targetPort(intstr.FromString("http")))},
		{"ports/targetPort-bad-name", svc("v", targetPort(intstr.FromString("bad_name")))},
		{"ports/targetPort-too-big", svc("v", targetPort(intstr.FromInt32(70000)))},
		{"ports/targetPort-on-headless-selectorless", svc("v", headless(), noSelector(), targetPort(intstr.FromInt32(8080)))},
		{"ports/appProtocol-http", svc("v", with(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = str("http") }))},
		{"ports/appProtocol-h2c", svc("v", with(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = str("kubernetes.io/h2c") }))},
		{"ports/appProtocol-domain", svc("v", with(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = str("example.com/custom") }))},
		{"ports/appProtocol-spaces", svc("v", with(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = str("my protocol") }))},
		// selector and session affinity
		{"selector/invalid-key", svc("v", with(func(s *corev1.ServiceSpec) { s.Selector = map[string]string{"a b": "c"} }))},
		{"selector/invalid-value", svc("v", with(func(s *corev1.ServiceSpec) { s.Selector = map[string]string{"a": "c d"} }))},
		{"affinity/clientip", svc("v", with(func(s *corev1.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityClientIP }))},
		{"affinity/clientip-timeout", svc("v", with(func(s *corev1.ServiceSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: i32(60)}}
		}))},
		{"affinity/timeout-too-big", svc("v", with(func(s *corev1.ServiceSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: i32(86401)}}
		}))},
		{"affinity/timeout-zero", svc("v", with(func(s *corev1.ServiceSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: i32(0)}}
		}))},
		{"affinity/config-without-clientip", svc("v", with(func(s *corev1.ServiceSpec) {
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: i32(60)}}
		}))},
		{"affinity/unknown", svc("v", with(func(s *corev1.ServiceSpec) { s.SessionAffinity = "Sticky" }))},
		// external IPs
		{"externalIPs/v4", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"192.0.2.10"} }))},
		{"externalIPs/v6", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"2001:db8::10"} }))},
		{"externalIPs/word", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"foo"} }))},
		{"externalIPs/loopback", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"127.0.0.1"} }))},
		{"externalIPs/unspecified", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"0.0.0.0"} }))},
		{"externalIPs/link-local", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"169.254.1.1"} }))},
		{"externalIPs/multicast", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"224.0.0.1"} }))},
		{"externalIPs/cidr", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"192.0.2.0/24"} }))},
		{"externalIPs/upper-case-v6", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"2001:DB8::11"} }))},
		{"externalIPs/on-externalname", svc("v", externalName("x.example.com"), with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"192.0.2.12"} }))},
		// load balancer fields
		{"sourceRanges/valid", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/64"} }))},
		{"sourceRanges/host-bits", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"192.0.2.1/24"} }))},
		{"sourceRanges/word", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"foo"} }))},
		{"sourceRanges/padded", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{" 192.0.2.0/24 "} }))},
		{"sourceRanges/on-clusterip", svc("v", with(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} }))},
		{"sourceRanges/annotation-valid", svc("v", typ(lb), annotate("service.beta.kubernetes.io/load-balancer-source-ranges", "192.0.2.0/24, 198.51.100.0/24"))},
		{"sourceRanges/annotation-bad", svc("v", typ(lb), annotate("service.beta.kubernetes.io/load-balancer-source-ranges", "192.0.2.0/24,bad"))},
		{"sourceRanges/annotation-on-clusterip", svc("v", annotate("service.beta.kubernetes.io/load-balancer-source-ranges", "bad"))},
		{"loadBalancerIP/valid", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerIP = "192.0.2.20" }))},
		{"loadBalancerIP/word", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerIP = "foo" }))},
		{"loadBalancerIP/on-clusterip", svc("v", with(func(s *corev1.ServiceSpec) { s.LoadBalancerIP = "192.0.2.21" }))},
		{"loadBalancerClass/valid", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerClass = str("example.com/lb") }))},
		{"loadBalancerClass/unqualified", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerClass = str("internal") }))},
		{"loadBalancerClass/invalid", svc("v", typ(lb), with(func(s *corev1.ServiceSpec) { s.LoadBalancerClass = str("bad class") }))},
		{"loadBalancerClass/on-nodeport", svc("v", typ(np), with(func(s *corev1.ServiceSpec) { s.LoadBalancerClass = str("example.com/lb") }))},
		// traffic policies and distribution
		{"externalTrafficPolicy/unknown", svc("v", typ(np), with(func(s *corev1.ServiceSpec) { s.ExternalTrafficPolicy = "Foo" }))},
		{"externalTrafficPolicy/cluster-on-clusterip", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster }))},
		{"internalTrafficPolicy/local", svc("v", with(func(s *corev1.ServiceSpec) {
			p := corev1.ServiceInternalTrafficPolicyLocal
			s.InternalTrafficPolicy = &p
		}))},
		{"internalTrafficPolicy/unknown", svc("v", with(func(s *corev1.ServiceSpec) {
			p := corev1.ServiceInternalTrafficPolicy("Foo")
			s.InternalTrafficPolicy = &p
		}))},
		{"trafficDistribution/prefer-close", svc("v", with(func(s *corev1.ServiceSpec) { s.TrafficDistribution = str("PreferClose") }))},
		{"trafficDistribution/prefer-same-zone", svc("v", with(func(s *corev1.ServiceSpec) { s.TrafficDistribution = str("PreferSameZone") }))},
		{"trafficDistribution/unknown", svc("v", with(func(s *corev1.ServiceSpec) { s.TrafficDistribution = str("Anywhere") }))},
		{"publishNotReadyAddresses", svc("v", with(func(s *corev1.ServiceSpec) { s.PublishNotReadyAddresses = true }))},
		// types
		{"type/unknown", svc("v", typ("Foo"))},
		{"externalName/valid", svc("v", externalName("db.example.com"))},
		{"externalName/missing", svc("v", externalName(""))},
		{"externalName/underscore", svc("v", externalName("Foo_Bar"))},
		{"externalName/trailing-dot", svc("v", externalName("db.example.com."))},
		{"externalName/ip", svc("v", externalName("192.0.2.30"))},
		{"externalName/with-clusterIP", svc("v", externalName("db.example.com"), clusterIP(f.pri(60)))},
		{"externalName/with-policy", svc("v", externalName("db.example.com"), policy(corev1.IPFamilyPolicySingleStack))},
		{"externalName/with-families", svc("v", externalName("db.example.com"), families(f.primary()))},
		{"externalName/with-none", svc("v", externalName("db.example.com"), headless())},
		{"externalName/on-clusterip-type", svc("v", with(func(s *corev1.ServiceSpec) { s.ExternalName = "db.example.com" }))},
		{"families/unknown", svc("v", families("IPv5"))},
		{"families/duplicate", svc("v", families(f.primary(), f.primary()))},
		{"policy/unknown", svc("v", policy("Bogus"))},
		// annotations and labels
		{"labels/invalid", svc("v", func(s *corev1.Service) { s.Labels = map[string]string{"a b": "c"} })},
		{"topology/mode-only", svc("v", annotate("service.kubernetes.io/topology-mode", "Auto"))},
		{"topology/hints-only", svc("v", annotate("service.kubernetes.io/topology-aware-hints", "auto"))},
		{"topology/case-differs", svc("v", annotate("service.kubernetes.io/topology-mode", "Auto"),
			annotate("service.kubernetes.io/topology-aware-hints", "auto"))},
	}
	var out []Case
	for _, x := range cs {
		out = append(out, Case{Name: fmt.Sprintf("validation/%s", x.name), Steps: steps(create(x.s))})
	}
	return out
}
