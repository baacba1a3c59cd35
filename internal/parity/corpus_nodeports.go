package parity

import (
	corev1 "k8s.io/api/core/v1"
)

// nodePortCases request, change, share and release node ports and
// health-check ports. Requested ports are below 30086, in the static band
// of the default range (its lowest 86 ports), where no dynamic pick lands.
func nodePortCases(f Family) []Case {
	np, lb, cip := corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	setPorts := func(p ...int32) func(*corev1.Service) {
		return func(s *corev1.Service) {
			for i := range p {
				s.Spec.Ports[i].NodePort = p[i]
			}
		}
	}
	return []Case{
		{Name: "nodeports/requested", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30010)))), get("n"))},
		{Name: "nodeports/requested-and-picked", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30011), tcpPort("b", 81, 0)))))},
		{Name: "nodeports/same-port-twice-same-protocol", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30012), tcpPort("b", 81, 30012)))))},
		{Name: "nodeports/same-port-tcp-and-udp", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 53, 30013), udpPort("b", 53, 30013)))))},
		{Name: "nodeports/tcp-and-udp-one-requested", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 53, 0), udpPort("b", 53, 30014)))))},
		{Name: "nodeports/tcp-and-udp-none-requested", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 53, 0), udpPort("b", 53, 0)))))},
		{Name: "nodeports/taken", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30015)))),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30015)))),
			del("n"),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30015)))))},
		{Name: "nodeports/already-exists-same-port", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30052)))),
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30052)))),
			get("n"))},
		{Name: "nodeports/below-range", Steps: steps(create(svc("n", typ(np), ports(tcpPort("a", 80, 29999)))))},
		{Name: "nodeports/above-range", Steps: steps(create(svc("n", typ(np), ports(tcpPort("a", 80, 32768)))))},
		{Name: "nodeports/invalid-number", Steps: steps(create(svc("n", typ(np), ports(tcpPort("a", 80, 65536)))))},
		{Name: "nodeports/negative", Steps: steps(create(svc("n", typ(np), ports(tcpPort("a", 80, -1)))))},
		{Name: "nodeports/on-clusterip", Steps: steps(create(svc("n", typ(cip), ports(tcpPort("a", 80, 30016)))))},
		{Name: "nodeports/on-externalname", Steps: steps(
			create(svc("n", externalName("x.example.com"), ports(tcpPort("a", 80, 30017)))))},
		{Name: "nodeports/lb-local-picked-hcnp", Steps: steps(
			create(svc("n", typ(lb), local())), get("n"))},
		{Name: "nodeports/lb-local-requested-hcnp", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30020), ports(tcpPort("a", 80, 30021)))))},
		{Name: "nodeports/hcnp-equals-nodeport", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30022), ports(tcpPort("a", 80, 30022)))))},
		{Name: "nodeports/hcnp-taken", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30023)))),
			create(svc("m", typ(lb), local(), hcnp(30023))))},
		{Name: "nodeports/hcnp-with-cluster-policy", Steps: steps(
			create(svc("n", typ(lb), hcnp(30024))))},
		{Name: "nodeports/hcnp-on-nodeport-local", Steps: steps(
			create(svc("n", typ(np), local(), hcnp(30025))))},
		{Name: "nodeports/hcnp-out-of-range", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(70000))))},
		{Name: "nodeports/local-on-clusterip", Steps: steps(create(svc("n", local())))},
		{Name: "nodeports/nodeport-local", Steps: steps(create(svc("n", typ(np), local())), get("n"))},
		{Name: "nodeports/hcnp-change-refused", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30026))),
			update("n", func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 30027 }),
			update("n", func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 0 }),
			get("n"))},
		{Name: "nodeports/local-to-cluster-releases-hcnp", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30028))),
			update("n", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster }),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30028)))))},
		{Name: "nodeports/local-to-cluster-keeping-hcnp", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30029))),
			update("n", func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
				s.Spec.HealthCheckNodePort = 30029
			}))},
		{Name: "nodeports/cluster-to-local-picks-hcnp", Steps: steps(
			create(svc("n", typ(lb))),
			update("n", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			get("n"))},
		{Name: "nodeports/cluster-to-local-requested-hcnp", Steps: steps(
			create(svc("n", typ(lb))),
			update("n", func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30030
			}))},
		{Name: "nodeports/lb-to-nodeport-drops-hcnp", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30031))),
			update("n", func(s *corev1.Service) { s.Spec.Type = np }),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30031)))))},
		{Name: "nodeports/allocate-lb-false", Steps: steps(
			create(svc("n", typ(lb), allocateLB(false))), get("n"))},
		{Name: "nodeports/allocate-lb-false-requested", Steps: steps(
			create(svc("n", typ(lb), allocateLB(false), ports(tcpPort("a", 80, 30032), tcpPort("b", 81, 0)))))},
		{Name: "nodeports/allocate-lb-false-local", Steps: steps(
			create(svc("n", typ(lb), allocateLB(false), local())))},
		{Name: "nodeports/allocate-lb-on-clusterip", Steps: steps(
			create(svc("n", allocateLB(false))), create(svc("m", typ(np), allocateLB(true))))},
		{Name: "nodeports/allocate-lb-false-to-true", Steps: steps(
			create(svc("n", typ(lb), allocateLB(false))),
			update("n", func(s *corev1.Service) { v := true; s.Spec.AllocateLoadBalancerNodePorts = &v }),
			get("n"))},
		{Name: "nodeports/allocate-lb-true-to-false-keeping", Steps: steps(
			create(svc("n", typ(lb), ports(tcpPort("a", 80, 30033)))),
			update("n", func(s *corev1.Service) { v := false; s.Spec.AllocateLoadBalancerNodePorts = &v }),
			get("n"))},
		{Name: "nodeports/allocate-lb-unset-on-update", Steps: steps(
			create(svc("n", typ(lb))),
			update("n", func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = nil }))},
		{Name: "nodeports/nodeport-to-clusterip-releases", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30034)))),
			update("n", func(s *corev1.Service) { s.Spec.Type = cip }),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30034)))))},
		{Name: "nodeports/nodeport-to-clusterip-keeping-port", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30035)))),
			update("n", func(s *corev1.Service) { s.Spec.Type = cip; s.Spec.Ports[0].NodePort = 30035 }))},
		{Name: "nodeports/clusterip-to-nodeport-requested", Steps: steps(
			create(svc("n")),
			update("n", func(s *corev1.Service) { s.Spec.Type = np; s.Spec.Ports[0].NodePort = 30036 }))},
		{Name: "nodeports/change-port", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30037)))),
			update("n", setPorts(30038)),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30037)))),
			create(svc("k", typ(np), ports(tcpPort("a", 80, 30038)))))},
		{Name: "nodeports/change-to-taken", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30039)))),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30040)))),
			update("n", setPorts(30040)),
			get("n"))},
		{Name: "nodeports/swap-own-ports", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30041), tcpPort("b", 81, 30042)))),
			update("n", setPorts(30042, 30041)),
			get("n"))},
		{Name: "nodeports/omitted-on-update-kept", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30043)))),
			update("n", setPorts(0)))},
		{Name: "nodeports/add-port-on-update", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30044)))),
			update("n", func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, tcpPort("b", 81, 0)) }),
			get("n"))},
		{Name: "nodeports/remove-port-on-update-releases", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30045), tcpPort("b", 81, 30046)))),
			update("n", func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] }),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30046)))))},
		{Name: "nodeports/duplicate-on-update", Steps: steps(
			create(svc("n", typ(np), ports(tcpPort("a", 80, 30047), tcpPort("b", 81, 30048)))),
			update("n", setPorts(30047, 30047)))},
		{Name: "nodeports/delete-releases", Steps: steps(
			create(svc("n", typ(lb), local(), hcnp(30049), ports(tcpPort("a", 80, 30050)))),
			del("n"),
			create(svc("m", typ(np), ports(tcpPort("a", 80, 30049), tcpPort("b", 81, 30050)))))},
		{Name: "nodeports/dual-stack-nodeport", Steps: steps(
			create(svc("n", typ(np), policy(corev1.IPFamilyPolicyPreferDualStack), ports(tcpPort("a", 80, 30051)))))},
	}
}
