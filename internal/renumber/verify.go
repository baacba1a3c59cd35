package renumber

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// verify checks the run's outcome from fresh lists: every Service it
// re-created exists with the spec, labels and annotations of its re-create
// object apart from the addresses it was given, none holds an address in
// the drained prefixes, no address is held twice, and each of their
// addresses is an IPAddress naming that Service, with no IPAddress left
// naming one of them for an address it no longer holds. Only the Services
// this run or its journal re-created are checked: others may change
// meanwhile.
func (r *runner) verify(ctx context.Context) error {
	services, err := r.listServices(ctx)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	addrs, err := r.listIPAddresses(ctx)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	byKey := map[string]*corev1.Service{}
	holders := map[netip.Addr][]string{}
	for i := range services {
		svc := &services[i]
		byKey[svc.Namespace+"/"+svc.Name] = svc
		for _, ip := range holding.IPs(svc) {
			holders[ip] = append(holders[ip], svc.Namespace+"/"+svc.Name)
		}
	}
	var problems []string
	for key, rec := range r.recs {
		live := byKey[key]
		if live == nil {
			problems = append(problems, fmt.Sprintf("%s: re-created, and now missing", key))
			continue
		}
		problems = append(problems, compareRecreated(key, rec, live)...)
		for _, ip := range holding.IPs(live) {
			if slices.ContainsFunc(r.prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
				problems = append(problems, fmt.Sprintf("%s: holds %s, inside the drained ServiceCIDR %s", key, ip, r.cfg.From))
			}
			if h := holders[ip]; len(h) > 1 {
				problems = append(problems, fmt.Sprintf("%s: %s is held by %v", key, ip, h))
			}
			a := addrs[ip.String()]
			if ref := a.Spec.ParentRef; !ipaddress.ParentIsService(&a) || ref.Namespace != live.Namespace || ref.Name != live.Name {
				problems = append(problems, fmt.Sprintf("%s: %s has no IPAddress naming it (parentRef %v)", key, ip, ref))
			}
		}
	}
	for name, a := range addrs {
		if !ipaddress.ParentIsService(&a) {
			continue
		}
		ref := a.Spec.ParentRef
		if r.recs[ref.Namespace+"/"+ref.Name] == nil {
			continue
		}
		ip, err := netip.ParseAddr(name)
		live := byKey[ref.Namespace+"/"+ref.Name]
		if err == nil && live != nil && !holding.HoldsIP(live, ip) {
			problems = append(problems, fmt.Sprintf("%s/%s: IPAddress %s names it for an address it does not hold", ref.Namespace, ref.Name, name))
		}
	}
	slices.Sort(problems)
	r.res.Problems = problems
	r.res.Verified = len(problems) == 0
	return nil
}

// compareRecreated compares a re-created Service with its re-create
// object: labels, annotations and spec apart from the addresses and node
// ports the server chose.
func compareRecreated(key string, rec, live *corev1.Service) []string {
	var out []string
	if !equality.Semantic.DeepEqual(rec.Labels, live.Labels) {
		out = append(out, fmt.Sprintf("%s: labels %v, want %v", key, live.Labels, rec.Labels))
	}
	if !equality.Semantic.DeepEqual(rec.Annotations, live.Annotations) {
		out = append(out, fmt.Sprintf("%s: annotations %v, want %v", key, live.Annotations, rec.Annotations))
	}
	want, got := withoutAddresses(rec.Spec), withoutAddresses(live.Spec)
	if !equality.Semantic.DeepEqual(want, got) {
		out = append(out, fmt.Sprintf("%s: spec differs from the one it had beyond its addresses", key))
	}
	return out
}

// withoutAddresses is spec with what a re-create may change cleared: the
// cluster IPs of the moved families and, when a kept one was taken while the
// Service was gone, the node ports.
func withoutAddresses(spec corev1.ServiceSpec) corev1.ServiceSpec {
	out := *spec.DeepCopy()
	out.ClusterIP, out.ClusterIPs = "", nil
	for i := range out.Ports {
		out.Ports[i].NodePort = 0
	}
	out.HealthCheckNodePort = 0
	return out
}
