package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair/report"
)

// explainByDesign completes the findings of an IPAddress-model pass that are
// left by design (report.Problem.Standing) with what clears them: it marks
// the findings about an IPAddress another controller manages as Foreign,
// which the repair reports without saying so, and words Clear for them and
// for every Service outside its scope. It reads only what such findings
// need: the IPAddresses not managed by ipallocator.k8s.io, and the
// ServiceCIDRs. A failed read leaves those findings as they are (a foreign
// IPAddress unresolved, an outOfScope with a Clear naming no ServiceCIDR)
// and is returned.
func explainByDesign(ctx context.Context, client kubernetes.Interface, rep *report.Report, ipAddresses bool) error {
	var wantForeign, wantCIDRs bool
	for _, p := range rep.Problems {
		wantForeign = wantForeign || mayBeForeign(ipAddresses, p)
		wantCIDRs = wantCIDRs || p.Type == report.TypeOutOfScope
	}
	var errs []error
	var managers map[string]string
	if wantForeign {
		var err error
		if managers, err = foreignIPAddresses(ctx, client); err != nil {
			errs = append(errs, err)
		}
	}
	var cidrs []networkingv1.ServiceCIDR
	if wantCIDRs {
		list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("list ServiceCIDRs: %w", err))
		} else {
			cidrs = list.Items
		}
	}
	for i := range rep.Problems {
		p := &rep.Problems[i]
		if manager, ok := managers[p.IP]; ok && mayBeForeign(ipAddresses, *p) {
			p.Foreign = true
			p.Clear = clearForeign(*p, manager)
		}
		if p.Type == report.TypeOutOfScope {
			p.Clear = clearOutOfScope(*p, cidrs)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("explain the findings left by design: %w", err)
	}
	return nil
}

// mayBeForeign reports whether p can be about an IPAddress another
// controller manages: a ClusterIP finding of the IPAddress repair
// (ipAddresses) that it left as a leak or a repair (the repair names no
// owner for those).
func mayBeForeign(ipAddresses bool, p report.Problem) bool {
	return ipAddresses && p.Resource == "" && !p.Fixed && (p.Type == report.TypeLeak || p.Type == report.TypeRepair)
}

// foreignIPAddresses returns the IPAddresses not managed by
// ipallocator.k8s.io, by name, with their managed-by label ("" when none).
func foreignIPAddresses(ctx context.Context, client kubernetes.Interface) (map[string]string, error) {
	list, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{
		LabelSelector: ipaddress.LabelManagedBy + "!=" + ipaddress.ManagedBy,
	})
	if err != nil {
		return nil, fmt.Errorf("list the IPAddresses other controllers manage: %w", err)
	}
	out := make(map[string]string, len(list.Items))
	for i := range list.Items {
		if obj := &list.Items[i]; !ipaddress.IsManaged(obj) {
			out[obj.Name] = obj.Labels[ipaddress.LabelManagedBy]
		}
	}
	return out, nil
}

// handOver is the command that gives the IPAddress named ip to the repair.
func handOver(ip string) string {
	return fmt.Sprintf("kubectl label ipaddress %s %s=%s --overwrite", ip, ipaddress.LabelManagedBy, ipaddress.ManagedBy)
}

// clearForeign says what clears a finding about the IPAddress p.IP, which
// manager manages ("": nothing does, it was made by hand).
func clearForeign(p report.Problem, manager string) string {
	who := "nothing manages it (made by hand?)"
	if manager != "" {
		who = fmt.Sprintf("%q manages it", manager)
	}
	if p.Type == report.TypeRepair {
		return fmt.Sprintf("the address is claimed for its Service either way; %s; to hand it to the repair: %s", who, handOver(p.IP))
	}
	return fmt.Sprintf("it claims the address for no Service; %s; once nothing needs it: kubectl delete ipaddress %s, or %s to have the repair free it",
		who, p.IP, handOver(p.IP))
}

// clearOutOfScope says what clears a Service outside its scope: a scope that
// selects it again, or its recreation (scopes apply to new addresses only).
// The ServiceCIDRs holding its address are named when cidrs has them.
func clearOutOfScope(p report.Problem, cidrs []networkingv1.ServiceCIDR) string {
	ns, name, _ := strings.Cut(p.Service, "/")
	recreate := fmt.Sprintf("recreate Service %s/%s without spec.clusterIP/clusterIPs (it then gets an address its scope allows)", ns, name)
	ip, err := netip.ParseAddr(p.IP)
	if err != nil {
		return recreate
	}
	var scoped, unscoped []string
	for i := range cidrs {
		c := &cidrs[i]
		if !holds(c, ip) {
			continue
		}
		s, err := scope.Parse(c.Annotations)
		switch {
		case err != nil:
			continue // a bad scope serves nobody: it says nothing of who may use the address
		case s != nil:
			scoped = append(scoped, fmt.Sprintf("%q (%s)", c.Name, s))
		default:
			unscoped = append(unscoped, c.Name)
		}
	}
	switch {
	case len(scoped) > 0:
		return fmt.Sprintf("kubectl label namespace %s (or the Service) so that the scope of ServiceCIDR %s, which holds %s, selects it again; or %s",
			ns, strings.Join(scoped, ", "), ip, recreate)
	case len(unscoped) > 0:
		return fmt.Sprintf("kubectl label namespace %s (or the Service) so that no scope without fallback selects it, since %s is in unscoped ServiceCIDR %s; or %s",
			ns, ip, allocation.QuoteNames(unscoped), recreate)
	}
	return fmt.Sprintf("relabel namespace %s (or the Service) so that its scope allows %s again; or %s", ns, ip, recreate)
}

// holds reports whether one of c's CIDRs contains ip.
func holds(c *networkingv1.ServiceCIDR, ip netip.Addr) bool {
	for _, text := range c.Spec.CIDRs {
		if p, err := netip.ParsePrefix(text); err == nil && p.Contains(ip) {
			return true
		}
	}
	return false
}
