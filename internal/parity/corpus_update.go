package parity

import (
	corev1 "k8s.io/api/core/v1"
)

func setPolicy(p corev1.IPFamilyPolicy) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &p }
}

// updateCases change family policies, addresses and types of stored
// Services.
func updateCases(f Family) []Case {
	single, prefer, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack
	np, lb, cip := corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP
	return []Case{
		{Name: "update/single-to-prefer", Steps: steps(
			create(svc("u")), update("u", setPolicy(prefer)), get("u"))},
		{Name: "update/single-to-require", Steps: steps(
			create(svc("u")), update("u", setPolicy(require)), get("u"))},
		{Name: "update/single-to-require-with-ips", Steps: steps(
			create(svc("u", ips(f.pri(50)))),
			update("u", func(s *corev1.Service) {
				setPolicy(require)(s)
				s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, f.sec(50))
			}))},
		{Name: "update/require-to-single-trimmed", Steps: steps(
			create(svc("u", policy(require))),
			update("u", func(s *corev1.Service) {
				setPolicy(single)(s)
				if len(s.Spec.ClusterIPs) > 1 {
					s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
					s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
				}
			}),
			get("u"))},
		{Name: "update/require-to-single-untrimmed", Steps: steps(
			create(svc("u", policy(require))), update("u", setPolicy(single)))},
		{Name: "update/prefer-to-single-trimmed", Steps: steps(
			create(svc("u", policy(prefer))),
			update("u", func(s *corev1.Service) {
				setPolicy(single)(s)
				s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
				s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
			}))},
		{Name: "update/prefer-to-require", Steps: steps(
			create(svc("u", policy(prefer))), update("u", setPolicy(require)))},
		{Name: "update/policy-unset", Steps: steps(
			create(svc("u", policy(prefer))),
			update("u", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = nil }))},
		{Name: "update/families-unset", Steps: steps(
			create(svc("u", policy(prefer))),
			update("u", func(s *corev1.Service) { s.Spec.IPFamilies = nil }))},
		{Name: "update/change-clusterIP", Steps: steps(
			create(svc("u", ips(f.pri(51)))),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = f.pri(52), []string{f.pri(52)} }))},
		{Name: "update/change-clusterIP-only", Steps: steps(
			create(svc("u", ips(f.pri(53)))),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP = f.pri(54) }))},
		{Name: "update/clear-clusterIPs", Steps: steps(
			create(svc("u", ips(f.pri(55)))),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
			get("u"))},
		{Name: "update/clear-clusterIP-keep-clusterIPs", Steps: steps(
			create(svc("u", ips(f.pri(56)))),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP = "" }))},
		{Name: "update/swap-family-order", Steps: steps(
			create(svc("u", policy(require))),
			update("u", func(s *corev1.Service) {
				if len(s.Spec.IPFamilies) == 2 {
					s.Spec.IPFamilies[0], s.Spec.IPFamilies[1] = s.Spec.IPFamilies[1], s.Spec.IPFamilies[0]
				}
			}))},
		{Name: "update/change-primary-family", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{f.other()} }))},
		{Name: "update/clusterip-to-nodeport-to-lb-and-back", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Spec.Type = np }),
			update("u", func(s *corev1.Service) { s.Spec.Type = lb }),
			update("u", func(s *corev1.Service) { s.Spec.Type = np }),
			update("u", func(s *corev1.Service) { s.Spec.Type = cip }),
			get("u"))},
		{Name: "update/clusterip-to-externalname", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeExternalName
				s.Spec.ExternalName = "x.example.com"
			}),
			get("u"))},
		{Name: "update/clusterip-to-externalname-clearing-ips", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeExternalName
				s.Spec.ExternalName = "x.example.com"
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = "", nil, nil, nil
			}))},
		{Name: "update/externalname-to-clusterip", Steps: steps(
			create(svc("u", externalName("x.example.com"))),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = cip
				s.Spec.ExternalName = ""
			}),
			get("u"))},
		{Name: "update/externalname-to-clusterip-requested", Steps: steps(
			create(svc("u", externalName("x.example.com"))),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = cip
				s.Spec.ExternalName = ""
				s.Spec.ClusterIP = f.pri(57)
			}))},
		{Name: "update/externalname-to-nodeport", Steps: steps(
			create(svc("u", externalName("x.example.com"))),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = np
				s.Spec.ExternalName = ""
			}))},
		{Name: "update/externalname-to-headless", Steps: steps(
			create(svc("u", externalName("x.example.com"))),
			update("u", func(s *corev1.Service) {
				s.Spec.Type = cip
				s.Spec.ExternalName = ""
				s.Spec.ClusterIP = "None"
			}))},
		{Name: "update/headless-to-clusterip", Steps: steps(
			create(svc("u", headless())),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = f.pri(58), []string{f.pri(58)} }))},
		{Name: "update/clusterip-to-headless", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }))},
		{Name: "update/headless-policy-change", Steps: steps(
			create(svc("u", headless(), noSelector())),
			update("u", setPolicy(single)),
			update("u", setPolicy(require)))},
		{Name: "update/headless-add-selector", Steps: steps(
			create(svc("u", headless(), noSelector())),
			update("u", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "x"} }),
			get("u"))},
		{Name: "update/labels-only", Steps: steps(
			create(svc("u", policy(prefer))),
			update("u", func(s *corev1.Service) { s.Labels = map[string]string{"team": "a"} }),
			get("u"))},
		{Name: "update/stale-resourceVersion", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Labels = map[string]string{"v": "1"} }),
			update("u", func(s *corev1.Service) { s.ResourceVersion = "1" }))},
		{Name: "update/missing", Steps: steps(update("u", func(s *corev1.Service) {}))},
		{Name: "update/rename", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Name = "u2" }))},
		{Name: "update/selector-and-ports", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) {
				s.Spec.Selector = map[string]string{"app": "v2"}
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "https", Port: 443})
			}),
			get("u"))},
		{Name: "update/drop-ports", Steps: steps(
			create(svc("u")),
			update("u", func(s *corev1.Service) { s.Spec.Ports = nil }))},
		{Name: "update/delete-twice", Steps: steps(
			create(svc("u")), del("u"), del("u"), get("u"))},
		// A delete of a Service holding a finalizer marks it and keeps its
		// address; removing the finalizer deletes it. Our delete decides
		// this on the watch cache's copy, checked against what it deletes.
		{Name: "update/delete-with-finalizer", Steps: steps(
			create(svc("u", finalizer("example.com/hold"))), del("u"), get("u"), del("u"),
			update("u", func(s *corev1.Service) { s.Finalizers = nil }), get("u"))},
		{Name: "update/finalizer-added-then-delete", Steps: steps(
			create(svc("u")), update("u", func(s *corev1.Service) { s.Finalizers = []string{"example.com/hold"} }),
			del("u"), get("u"), update("u", func(s *corev1.Service) { s.Finalizers = nil }), get("u"))},
	}
}
