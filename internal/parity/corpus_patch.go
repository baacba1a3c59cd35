package parity

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// patchCases change Services with the three patch types, and write their
// status.
func patchCases(f Family) []Case {
	merge, strategic, jsonPatch := types.MergePatchType, types.StrategicMergePatchType, types.JSONPatchType
	return []Case{
		{Name: "patch/merge-add-port", Steps: steps(
			create(svc("p")),
			patch("p", merge, `{"spec":{"ports":[{"name":"http","port":80},{"name":"https","port":443}]}}`))},
		{Name: "patch/strategic-add-port", Steps: steps(
			create(svc("p")),
			patch("p", strategic, `{"spec":{"ports":[{"name":"https","port":443}]}}`))},
		{Name: "patch/strategic-to-nodeport", Steps: steps(
			create(svc("p")),
			patch("p", strategic, `{"spec":{"type":"NodePort"}}`),
			patch("p", strategic, `{"spec":{"type":"ClusterIP"}}`))},
		{Name: "patch/merge-to-loadbalancer-local", Steps: steps(
			create(svc("p")),
			patch("p", merge, `{"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local"}}`))},
		{Name: "patch/json-remove-clusterIP", Steps: steps(
			create(svc("p", ips(f.pri(70)))),
			patch("p", jsonPatch, `[{"op":"remove","path":"/spec/clusterIP"},{"op":"remove","path":"/spec/clusterIPs"}]`))},
		{Name: "patch/json-replace-clusterIP", Steps: steps(
			create(svc("p", ips(f.pri(71)))),
			patch("p", jsonPatch, fmt.Sprintf(`[{"op":"replace","path":"/spec/clusterIP","value":%q},{"op":"replace","path":"/spec/clusterIPs","value":[%q]}]`, f.pri(72), f.pri(72))))},
		{Name: "patch/merge-clusterIPs-null", Steps: steps(
			create(svc("p", ips(f.pri(73)))),
			patch("p", merge, `{"spec":{"clusterIPs":null,"clusterIP":null}}`))},
		{Name: "patch/merge-upgrade-to-dual", Steps: steps(
			create(svc("p")),
			patch("p", merge, `{"spec":{"ipFamilyPolicy":"RequireDualStack"}}`))},
		{Name: "patch/merge-add-secondary-ip", Steps: steps(
			create(svc("p", ips(f.pri(74)))),
			patch("p", merge, fmt.Sprintf(`{"spec":{"ipFamilyPolicy":"PreferDualStack","clusterIPs":[%q,%q]}}`, f.pri(74), f.sec(74))))},
		{Name: "patch/merge-headless-to-externalname", Steps: steps(
			create(svc("p", headless())),
			patch("p", merge, `{"spec":{"type":"ExternalName","externalName":"db.example.com","selector":null}}`))},
		{Name: "patch/merge-labels", Steps: steps(
			create(svc("p")),
			patch("p", merge, `{"metadata":{"labels":{"tier":"web"}}}`))},
		{Name: "patch/merge-bad-json", Steps: steps(
			create(svc("p")),
			patch("p", merge, `{"spec":`))},
		{Name: "patch/json-test-fails", Steps: steps(
			create(svc("p")),
			patch("p", jsonPatch, `[{"op":"test","path":"/spec/type","value":"NodePort"}]`))},
		{Name: "patch/missing", Steps: steps(
			patch("p", merge, `{"metadata":{"labels":{"a":"b"}}}`))},
		{Name: "status/lb-ingress-ip", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.50"}]}}}`),
			get("p"))},
		{Name: "status/lb-ingress-hostname", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.com"}]}}}`))},
		{Name: "status/lb-ingress-bad-ip", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"foo"}]}}}`))},
		{Name: "status/lb-ingress-non-canonical-ip", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"192.000.2.51"}]}}}`))},
		{Name: "status/lb-ingress-ipmode", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.52","ipMode":"Proxy"}]}}}`),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.52","ipMode":"Bogus"}]}}}`))},
		{Name: "status/lb-ingress-ipmode-without-ip", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.com","ipMode":"VIP"}]}}}`))},
		{Name: "status/on-clusterip", Steps: steps(
			create(svc("p")),
			patchStatus("p", merge, `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.53"}]}}}`))},
		{Name: "status/put-ignores-spec", Steps: steps(
			create(svc("p", typ(corev1.ServiceTypeLoadBalancer))),
			updateStatus("p", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.54"}}
			}),
			get("p"))},
		{Name: "status/conditions", Steps: steps(
			create(svc("p")),
			patchStatus("p", merge, `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Ok","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`),
			patchStatus("p", merge, `{"status":{"conditions":[{"type":"Ready","status":"Maybe","reason":"Ok","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`))},
		{Name: "status/spec-patch-ignored", Steps: steps(
			create(svc("p")),
			patchStatus("p", merge, `{"spec":{"type":"NodePort"}}`),
			get("p"))},
	}
}

// dryRunCases check that a dry run answers as the real request would and
// keeps nothing.
func dryRunCases(f Family) []Case {
	np := corev1.ServiceTypeNodePort
	return []Case{
		{Name: "dryrun/create-then-real", Steps: steps(
			createDry(svc("d", ips(f.pri(80)), typ(np), ports(tcpPort("a", 80, 30080)))),
			get("d"),
			create(svc("e", ips(f.pri(80)), typ(np), ports(tcpPort("a", 80, 30080)))))},
		{Name: "dryrun/create-picked", Steps: steps(
			createDry(svc("d", typ(corev1.ServiceTypeLoadBalancer), local(), policy(corev1.IPFamilyPolicyPreferDualStack))))},
		{Name: "dryrun/create-taken", Steps: steps(
			create(svc("d", ips(f.pri(81)))),
			refusedAsTaken(createDry(svc("e", ips(f.pri(81))))))},
		{Name: "dryrun/create-invalid", Steps: steps(
			createDry(svc("d", ips("10.200.0.1"))))},
		{Name: "dryrun/update-type", Steps: steps(
			create(svc("d")),
			updateDry("d", func(s *corev1.Service) { s.Spec.Type = np; s.Spec.Ports[0].NodePort = 30081 }),
			get("d"),
			create(svc("e", typ(np), ports(tcpPort("a", 80, 30081)))))},
		{Name: "dryrun/update-to-dual", Steps: steps(
			create(svc("d")),
			updateDry("d", setPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			get("d"))},
		{Name: "dryrun/update-release", Steps: steps(
			create(svc("d", typ(np), ports(tcpPort("a", 80, 30082)))),
			updateDry("d", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }),
			create(svc("e", typ(np), ports(tcpPort("a", 80, 30082)))))},
		{Name: "dryrun/delete", Steps: steps(
			create(svc("d", ips(f.pri(82)))),
			delDry("d"),
			get("d"),
			create(svc("e", ips(f.pri(82)))))},
		{Name: "dryrun/patch", Steps: steps(
			create(svc("d")),
			Step{Op: OpPatch, Kind: KindService, Name: "d", PatchType: types.MergePatchType, Patch: `{"spec":{"type":"NodePort"}}`, DryRun: true},
			get("d"))},
	}
}

// refusedAsTaken marks a dry run asking for a taken cluster IP: upstream's
// IPAddress allocator checks only the range in a dry run and answers 201;
// we refuse it as the real request would be refused (as upstream's bitmap
// model did, and as its node-port dry runs still do), so a dry run
// predicts the real answer.
func refusedAsTaken(s Step) Step {
	s.Deliberate = &Deliberate{Why: "a dry run refuses a taken cluster IP as the real request would", Code: 422, Reason: "Invalid"}
	return s
}
