package rangeusage

import (
	"context"
	"fmt"
	"net/netip"
	"path"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// listPage is the page size of the ServiceCIDRs' list: a cluster's
// ServiceCIDRs are read in pages rather than one response the API server
// must build whole. The Services and IPAddresses, a million of them at
// most scales, are read as the repairs read them: a first page of
// report.ListPageSize, then report.NextPageSize (each page costs the API
// server a walk of every key after it).
const listPage = 500

// FromIPAddresses measures the IPAddress model: every ServiceCIDR against
// every IPAddress. It lists servicecidrs and ipaddresses, nothing else.
func FromIPAddresses(ctx context.Context, client kubernetes.Interface) (*Usage, error) {
	var ranges []Range
	opts := metav1.ListOptions{Limit: listPage}
	for {
		list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list servicecidrs: %w", err)
		}
		for i := range list.Items {
			ranges = append(ranges, serviceCIDRRanges(&list.Items[i])...)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	var addrs []Address
	opts = metav1.ListOptions{Limit: report.ListPageSize}
	for {
		list, err := client.NetworkingV1().IPAddresses().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list ipaddresses: %w", err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			ip, err := subrange.ParseAddr(obj.Name)
			if err != nil {
				continue // not an address the allocators can hold; repair reports it
			}
			a := Address{IP: ip}
			if ipaddress.ParentIsService(obj) {
				a.Namespace = obj.Spec.ParentRef.Namespace
			}
			addrs = append(addrs, a)
		}
		if list.Continue == "" {
			break
		}
		if opts.Continue == "" {
			opts.Limit = report.NextPageSize(list.RemainingItemCount)
		}
		opts.Continue = list.Continue
	}
	return Compute(model.IPAddress, ranges, addrs)
}

func serviceCIDRRanges(c *networkingv1.ServiceCIDR) []Range {
	ready := c.DeletionTimestamp == nil
	for _, cond := range c.Status.Conditions {
		if cond.Type == networkingv1.ServiceCIDRConditionReady && cond.Status == metav1.ConditionFalse {
			ready = false
		}
	}
	scopeText := ""
	switch sco, err := scope.Parse(c.Annotations); {
	case err != nil:
		scopeText, ready = "invalid, not served: "+err.Error(), false
	case sco != nil:
		scopeText = sco.String()
	}
	mode, err := lifecycle.Parse(c.Annotations)
	lifecycleText := mode.String()
	if err != nil {
		lifecycleText += " (" + err.Error() + ")"
	}
	var out []Range
	for _, text := range c.Spec.CIDRs {
		prefix, err := subrange.ParsePrefix(text)
		if err != nil {
			continue // the API validates CIDRs; a bad one serves nothing
		}
		out = append(out, Range{Prefix: prefix, Source: "ServiceCIDR/" + c.Name, Ready: ready, Scope: scopeText, Lifecycle: lifecycleText})
	}
	return out
}

// FromBitmap measures the bitmap model: the RangeAllocation of each family,
// read from etcd with plain Gets (never through an allocator, which may
// write), and the Services, listed through the API, to say which namespace
// holds each allocated address. It returns an error when no map exists under
// prefix.
func FromBitmap(ctx context.Context, etcd clientv3.KV, prefix string, client kubernetes.Interface) (*Usage, error) {
	layout := etcdlayout.Layout{Prefix: prefix}
	stored, err := clusterip.ReadStoredIPMaps(ctx, etcd, layout)
	if err != nil {
		return nil, err
	}
	var ranges []Range
	for _, m := range stored {
		ranges = append(ranges, Range{Prefix: m.Range.Prefix(), Source: "RangeAllocation/" + path.Base(m.Key), Ready: true})
	}
	if len(ranges) == 0 {
		return nil, fmt.Errorf("no bitmap map (RangeAllocation) under %s", layout.RangesPrefix())
	}
	owners, err := serviceNamespaces(ctx, client)
	if err != nil {
		return nil, err
	}
	var addrs []Address
	for _, m := range stored {
		bits := m.Map
		// A bitmap holds at most about 2^20 bits (IPv4 /12; IPv6 is capped
		// at 65,535), so visiting its set bits is bounded.
		if err := bits.ForEach(ctx, func(ip netip.Addr) {
			addrs = append(addrs, Address{IP: ip, Namespace: owners[ip]})
		}); err != nil {
			return nil, err
		}
	}
	return Compute(model.Bitmap, ranges, addrs)
}

// FromServices measures ranges, under m's usable-address rules, against the
// addresses the Services hold, listed through the API: the bitmap model
// when its maps in etcd cannot be read. An allocated address no Service
// holds (a leak) is not seen; Usage.CountedFrom says so.
func FromServices(ctx context.Context, client kubernetes.Interface, m model.Name, ranges []Range) (*Usage, error) {
	owners, err := serviceNamespaces(ctx, client)
	if err != nil {
		return nil, err
	}
	addrs := make([]Address, 0, len(owners))
	for ip, ns := range owners {
		addrs = append(addrs, Address{IP: ip, Namespace: ns})
	}
	usage, err := Compute(m, ranges, addrs)
	if err != nil {
		return nil, err
	}
	usage.CountedFrom = SourceServices
	return usage, nil
}

// serviceNamespaces maps every Service address to the Service's namespace.
func serviceNamespaces(ctx context.Context, client kubernetes.Interface) (map[netip.Addr]string, error) {
	owners := map[netip.Addr]string{}
	err := eachService(ctx, client, func(svc *corev1.Service) {
		for _, ip := range holding.IPs(svc) {
			owners[ip] = svc.Namespace
		}
	})
	return owners, err
}

// eachService calls fn with every Service, listed in the repairs' pages.
func eachService(ctx context.Context, client kubernetes.Interface, fn func(*corev1.Service)) error {
	opts := metav1.ListOptions{Limit: report.ListPageSize}
	for {
		list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list services: %w", err)
		}
		for i := range list.Items {
			fn(&list.Items[i])
		}
		if list.Continue == "" {
			return nil
		}
		if opts.Continue == "" {
			opts.Limit = report.NextPageSize(list.RemainingItemCount)
		}
		opts.Continue = list.Continue
	}
}
