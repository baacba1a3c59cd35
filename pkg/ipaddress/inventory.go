package ipaddress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
)

// Has reports whether ip's IPAddress exists, asking the API server.
func (a *Allocator) Has(ctx context.Context, ip netip.Addr) (bool, error) {
	if !ip.IsValid() || ip.Is6() != a.ipv6 {
		return false, nil
	}
	_, err := a.objects.Get(ctx, ip.String(), metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("has %s: %w", ip, err)
	}
}

// ForEach calls fn, in ascending order, for every address of this family
// that has an IPAddress in the cache and lies in a served range.
func (a *Allocator) ForEach(ctx context.Context, fn func(netip.Addr)) error {
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	addrs := a.cachedAddrs(familyPrefix(a.ipv6))
	a.lock()
	addrs = slices.DeleteFunc(addrs, func(ip netip.Addr) bool { return !a.containsLocked(ip) })
	a.mu.Unlock()
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, ip := range addrs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("for each: %w", err)
		}
		fn(ip)
	}
	return nil
}

// UsageByCIDR reports each served range's own fill level (an address in two
// overlapping ranges counts in both), for per-CIDR metrics. It does no I/O.
func (a *Allocator) UsageByCIDR(context.Context) (map[netip.Prefix]allocation.Usage, error) {
	if !a.ready.Load() {
		return nil, allocation.ErrNotReady
	}
	a.lock()
	defer a.mu.Unlock()
	out := make(map[netip.Prefix]allocation.Usage, len(a.ranges))
	for _, r := range a.ranges {
		out[r.rng.Prefix()] = allocation.Usage{
			Size: r.rng.Size(), StaticSize: r.rng.StaticSize(),
			Used: r.index.Used(), StaticUsed: r.index.UsedStatic(),
		}
	}
	return out, nil
}

// Usage sums the maximal ranges (those inside no other served range), so
// overlapping ServiceCIDRs are counted once. Addresses being claimed count as
// used.
func (a *Allocator) Usage(context.Context) (allocation.Usage, error) {
	if !a.ready.Load() {
		return allocation.Usage{}, allocation.ErrNotReady
	}
	a.lock()
	defer a.mu.Unlock()
	var u allocation.Usage
	for _, r := range a.ranges {
		if !a.maximalLocked(r) {
			continue
		}
		u.Size += r.rng.Size()
		u.StaticSize += r.rng.StaticSize()
		u.Used += r.index.Used()
		u.StaticUsed += r.index.UsedStatic()
	}
	return u, nil
}
