package parity

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

var (
	policies = []corev1.IPFamilyPolicy{"", corev1.IPFamilyPolicySingleStack,
		corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}
	familyLists = [][]corev1.IPFamily{nil, {corev1.IPv4Protocol}, {corev1.IPv6Protocol},
		{corev1.IPv4Protocol, corev1.IPv6Protocol}, {corev1.IPv6Protocol, corev1.IPv4Protocol}}
)

func policyName(p corev1.IPFamilyPolicy) string {
	if p == "" {
		return "unset"
	}
	return string(p)
}

func familiesName(fs []corev1.IPFamily) string {
	if fs == nil {
		return "unset"
	}
	var s []string
	for _, f := range fs {
		s = append(s, string(f))
	}
	return strings.Join(s, ",")
}

// createMatrix creates (and deletes) a Service of every allocating type,
// and headless ones with and without a selector, for every family policy
// and every ipFamilies list.
func createMatrix(f Family) []Case {
	kinds := []struct {
		name string
		opts []opt
	}{
		{"clusterip", nil},
		{"nodeport", []opt{typ(corev1.ServiceTypeNodePort)}},
		{"loadbalancer", []opt{typ(corev1.ServiceTypeLoadBalancer)}},
		{"headless", []opt{headless()}},
		{"headless-selectorless", []opt{headless(), noSelector()}},
	}
	var cs []Case
	for _, k := range kinds {
		for _, p := range policies {
			for _, fl := range familyLists {
				opts := append([]opt{policy(p), families(fl...)}, k.opts...)
				cs = append(cs, Case{
					Name:  fmt.Sprintf("create/%s/policy=%s/families=%s", k.name, policyName(p), familiesName(fl)),
					Steps: steps(create(svc("m", opts...)), del("m")),
				})
			}
		}
	}
	return cs
}

// clusterIPCases request specific addresses: valid, taken, outside every
// range, reserved, malformed and non-canonical, with each family policy
// where it changes the answer.
func clusterIPCases(f Family) []Case {
	type spec struct {
		name string
		opts []opt
	}
	specs := []spec{
		{"clusterIP-only", []opt{clusterIP(f.pri(5))}},
		{"clusterIPs-only", []opt{with(func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{f.pri(6)} })}},
		{"other-family", []opt{ips(f.sec(7))}},
		{"both-agree", []opt{ips(f.pri(8))}},
		{"clusterIP-vs-clusterIPs", []opt{clusterIP(f.pri(9)), with(func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{f.pri(10)} })}},
		{"dual", []opt{ips(f.pri(11), f.sec(11))}},
		{"dual-reversed", []opt{ips(f.sec(12), f.pri(12))}},
		{"dual-same-family", []opt{ips(f.pri(13), f.pri(14))}},
		{"dual-with-families", []opt{ips(f.pri(15), f.sec(15)), families(f.primary(), f.other())}},
		{"families-disagree", []opt{ips(f.pri(16)), families(f.other())}},
		{"ip-then-none", []opt{ips(f.pri(17), "None")}},
		{"none-then-ip", []opt{ips("None", f.pri(17))}},
		{"empty-strings", []opt{ips("", "")}},
		{"three", []opt{ips(f.pri(18), f.sec(18), f.pri(19))}},
		{"outside-v4", []opt{ips("10.200.0.5")}},
		{"outside-v6", []opt{ips("fd00:99::5")}},
		{"network-v4", []opt{ips("10.0.0.0")}},
		{"network-v6", []opt{ips("fd00:10::")}},
		{"broadcast-v4", []opt{ips("10.0.255.255")}},
		{"last-v6", []opt{ips("fd00:10::f:ffff")}},
		{"leading-zero-v4", []opt{ips("10.0.0.020")}},
		{"leading-zero-first-octet", []opt{ips("010.0.0.21")}},
		{"upper-case-v6", []opt{ips("FD00:10::16")}},
		{"long-form-v6", []opt{ips("fd00:0010:0000:0000:0000:0000:0000:0017")}},
		{"v4-mapped-v6", []opt{ips("::ffff:10.0.0.24")}},
		{"three-octets", []opt{ips("10.0.0")}},
		{"word", []opt{ips("not-an-ip")}},
		{"cidr", []opt{ips("10.0.0.25/24")}},
		{"kubernetes-service-ip", []opt{ips(f.pri(1))}},
		{"none-on-nodeport", []opt{headless(), typ(corev1.ServiceTypeNodePort)}},
		{"none-on-loadbalancer", []opt{headless(), typ(corev1.ServiceTypeLoadBalancer)}},
		{"none-in-clusterIPs-only", []opt{with(func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{"None"} })}},
		{"nodeport-with-ip", []opt{ips(f.pri(26)), typ(corev1.ServiceTypeNodePort)}},
		{"loadbalancer-dual-ips", []opt{ips(f.pri(27), f.sec(27)), typ(corev1.ServiceTypeLoadBalancer)}},
	}
	pols := []corev1.IPFamilyPolicy{"", corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyRequireDualStack}
	var cs []Case
	for _, sp := range specs {
		for _, p := range pols {
			opts := append([]opt{policy(p)}, sp.opts...)
			c := Case{
				Name:  fmt.Sprintf("clusterips/%s/policy=%s", sp.name, policyName(p)),
				Steps: steps(create(svc("c", opts...)), get("c")),
			}
			if sp.name == "last-v6" {
				// Beyond the bitmap's window: an IPv6 bitmap covers the first
				// 65,535 addresses of its range, as upstream's bitmap model did.
				c.Models = ipAddressModel
			}
			cs = append(cs, c)
		}
	}
	cs = append(cs,
		Case{Name: "clusterips/taken-then-freed", Steps: steps(
			create(svc("a", ips(f.pri(40)))),
			create(svc("b", ips(f.pri(40)))),
			del("a"),
			create(svc("b", ips(f.pri(40)))),
		)},
		Case{Name: "clusterips/taken-secondary", Steps: takenSecondary(f)},
		Case{Name: "clusterips/dynamic-then-requested", Steps: steps(
			create(svc("a")),
			create(svc("b", ips(f.pri(43)))),
			get("a"),
			get("b"),
		)},
		Case{Name: "clusterips/already-exists", Steps: steps(
			create(svc("a", ips(f.pri(44)))),
			create(svc("a", ips(f.pri(45)))),
			create(svc("b", ips(f.pri(45)))),
		)},
		// The same Service created twice: kube-apiserver allocates before
		// it writes, so asking again for the address the existing Service
		// holds is refused as taken (422), not as already existing (409);
		// an invalid second create is refused as invalid; a dynamic one
		// gets 409 and its picked address back.
		Case{Name: "clusterips/already-exists-same-address", Steps: steps(
			create(svc("a", ips(f.pri(83)))),
			create(svc("a", ips(f.pri(83)))),
			get("a"),
		)},
		Case{Name: "clusterips/already-exists-invalid", Steps: steps(
			create(svc("a")),
			create(svc("a", ports())),
		)},
		Case{Name: "clusterips/already-exists-dynamic", Steps: steps(
			create(svc("a")),
			create(svc("a")),
			create(svc("b", ips(f.pri(84)))),
			get("a"),
		)},
	)
	return cs
}

// takenSecondary asks for a secondary address another Service holds, then
// for a free one. When the second family fails, upstream keeps the first
// family's address it had just taken (released only by its repair loop),
// and takes the families in random order; we release it at once, so the
// retry succeeds: the retry is marked deliberate, and the failure's text
// (which family it names) is not compared.
func takenSecondary(f Family) []Step {
	require := corev1.IPFamilyPolicyRequireDualStack
	st := steps(
		create(svc("a", policy(require), ips(f.pri(41), f.sec(41)))),
		create(svc("b", policy(require), ips(f.pri(42), f.sec(41)))),
		create(svc("b", policy(require), ips(f.pri(42), f.sec(42)))),
	)
	if strings.Contains(f.ServiceRange, ",") {
		why := "a create refused on its second family releases the first family's address at once"
		st[1].Deliberate = &Deliberate{Why: why, Code: 422, Reason: "Invalid"}
		st[2].Deliberate = &Deliberate{Why: why, Code: 201}
	}
	return st
}
