package parity

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// itemCases are twelve behaviours where a careless implementation differs
// from kube-apiserver, one named case each.
func itemCases(f Family) []Case {
	lb := corev1.ServiceTypeLoadBalancer
	return []Case{
		{Name: "item01/port-asking-for-the-health-check-port", Steps: steps(
			create(svc("item01", typ(lb), local(), hcnp(30072),
				ports(tcpPort("a", 80, 30070), tcpPort("b", 81, 30071)))),
			update("item01", func(s *corev1.Service) {
				s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort = 30071, 30072
				s.Spec.HealthCheckNodePort = 0
			}),
			get("item01"),
			del("item01"),
			// Every port is free again: a new Service can take all three.
			create(svc("item01-after", typ(lb), local(), hcnp(30070),
				ports(tcpPort("a", 80, 30071), tcpPort("b", 81, 30072)))),
		)},
		{Name: "item02/allocateLoadBalancerNodePorts-false-releases", Steps: steps(
			create(svc("item02", typ(lb), ports(tcpPort("a", 80, 0), tcpPort("b", 81, 30073)))),
			update("item02", func(s *corev1.Service) {
				no := false
				s.Spec.AllocateLoadBalancerNodePorts = &no
				s.Spec.Ports[0].NodePort = 0
				s.Spec.Ports[1].NodePort = 0
			}),
			// The released port can be taken by another Service.
			create(svc("item02-other", typ(corev1.ServiceTypeNodePort), ports(tcpPort("a", 80, 30073)))),
		)},
		{Name: "item03/headless-update-without-clusterIP", Steps: steps(
			create(svc("item03", headless())),
			update("item03", func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
				s.Labels = map[string]string{"helm": "upgraded"}
			}),
		)},
		{Name: "item04/headless-to-externalname", Steps: steps(
			create(svc("item04", headless())),
			update("item04", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeExternalName
				s.Spec.ExternalName = "db.example.com"
				s.Spec.Selector = nil
			}),
		)},
		// Item 5 (a Service stored in etcd as JSON) cannot be sent through
		// the API; this case pins the read path the JSON decoder shares, and
		// test/integration's TestJSONStoredService writes JSON into etcd.
		{Name: "item05/read-back", Steps: steps(
			create(svc("item05", typ(corev1.ServiceTypeNodePort))),
			get("item05"),
		)},
		{Name: "item06/headless-selectorless-families", Steps: steps(
			create(svc("item06", headless(), noSelector())),
			create(svc("item06-single", headless(), noSelector(), policy(corev1.IPFamilyPolicySingleStack))),
			create(svc("item06-selector", headless())),
		)},
		{Name: "item07/name-starting-with-a-digit", Steps: steps(
			create(svc("1-test-service")),
			create(svc("1")),
		)},
		{Name: "item08/strict-ip-parsing", Steps: steps(
			create(svc("item08-ext", with(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"001.002.003.004"} }))),
			create(svc("item08-src", typ(lb), with(func(s *corev1.ServiceSpec) {
				s.LoadBalancerSourceRanges = []string{"001.002.003.000/24"}
			}))),
			create(svc("item08-ann", typ(lb), annotate("service.beta.kubernetes.io/load-balancer-source-ranges", "001.002.003.000/24"))),
			create(svc("item08-ok", typ(lb), with(func(s *corev1.ServiceSpec) {
				s.ExternalIPs = []string{"192.0.2.4"}
				s.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			}))),
		)},
		{Name: "item09/invalid-appProtocol", Steps: steps(
			create(svc("item09", with(func(s *corev1.ServiceSpec) {
				p := "example.com/protocol_with{invalid}[characters]"
				s.Ports[0].AppProtocol = &p
			}))),
		)},
		{Name: "item10/externalname-internalTrafficPolicy", Steps: steps(
			create(svc("item10", externalName("db.example.com"), with(func(s *corev1.ServiceSpec) {
				p := corev1.ServiceInternalTrafficPolicyLocal
				s.InternalTrafficPolicy = &p
			}))),
			get("item10"),
			patch("item10", types.MergePatchType, `{"spec":{"internalTrafficPolicy":"Cluster"}}`),
		)},
		{Name: "item11/mismatched-topology-annotations", Steps: steps(
			create(svc("item11", annotate("service.kubernetes.io/topology-mode", "Auto"),
				annotate("service.kubernetes.io/topology-aware-hints", "Disabled"))),
			create(svc("item11-same", annotate("service.kubernetes.io/topology-mode", "Auto"),
				annotate("service.kubernetes.io/topology-aware-hints", "Auto"))),
		)},
		{Name: "item12/error-texts", Steps: steps(
			create(svc("item12-none", policy(corev1.IPFamilyPolicyRequireDualStack), ips(f.pri(12), "None"))),
			create(svc("item12-empty", clusterIP(""), with(func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{""} }))),
			create(svc("item12-two-families", families(f.primary(), f.other()))),
			create(svc("item12-three", policy(corev1.IPFamilyPolicyRequireDualStack), ips(f.pri(13), f.sec(13), f.pri(14)))),
		)},
	}
}
