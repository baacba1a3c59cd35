package clusterip

import (
	"context"
	"fmt"
	"net/netip"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// Re-ranging a stored map (a changed --service-cluster-ip-range).
//
// Invariants and why:
//
//   - The new map is written with one transaction that compares the
//     ModRevision of the value it was computed from. Why: a replica still on
//     the old range may allocate between our read and our write; its bit must
//     not be lost, so a lost compare recomputes from the fresh value.
//   - Every bit of the old map whose address is a usable address of the new
//     range is kept, at the new range's index (ip - network - 1). Why: growing
//     a range (/16 → /15) must never free an address a Service holds.
//   - Every address a Service in etcd holds (internal/holding) that the new range
//     contains is set too, read in the same etcd snapshot as the map. Why: an
//     address outside the old map (dropped by an earlier shrink, then grown
//     back) may still be held by a Service; without this it would be free
//     until the first repair pass and a create in between could hand it out
//     twice.
//   - Bits outside the new range are dropped and each one is logged; the
//     Services holding them are reported by the bitmap repair
//     (ClusterIPOutOfRange), as upstream does.
//   - A stored map of the other IP family is refused
//     (bitmap.ErrStoredRangeMismatch): that is a swap of the cluster's
//     family order, where every allocation of both keys would be dropped at
//     once.

// Rerange describes one re-ranging of the stored map.
type Rerange struct {
	// From is the range the stored map had, To the configured one.
	From, To netip.Prefix
	// Kept is the number of allocations carried over from the old map.
	Kept int
	// Added are Service IPs the new range contains that the old map lacked.
	Added []netip.Addr
	// Dropped are the old map's allocations outside the new range.
	Dropped []netip.Addr
}

// servicesPrefix is where the Services of the key's etcd prefix live:
// <prefix>/ranges/<name> → <prefix>/services/specs/.
func (a *EtcdAllocator) servicesPrefix() string {
	return etcdlayout.LayoutOfRange(a.Key()).ServicesPrefix()
}

// storedPrefix reads the range a stored map is for. It is nil-error only for
// a range that is a CIDR.
func (a *EtcdAllocator) storedPrefix(storedRange string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(storedRange)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s holds range %q, configured %s: %w", a.Key(), storedRange, a.rng.Prefix(), bitmap.ErrStoredRangeMismatch)
	}
	return p, nil
}

// rerange rewrites the stored map, which holds another range of the same
// family, for the configured range (see the invariants above), with the
// Services read in the same transaction as the map. It returns nil when the
// stored map already is for the configured range.
func (a *EtcdAllocator) rerange(ctx context.Context) (*Rerange, error) {
	logger := klog.FromContext(ctx)
	var (
		rr       *Rerange
		from     netip.Prefix
		attempts int
	)
	wrote, err := a.RerangeWith(ctx, a.servicesPrefix(), func(storedRange string, data []byte, services []*mvccpb.KeyValue) ([]byte, error) {
		if attempts++; attempts > 1 {
			logger.V(2).Info("Re-range lost a compare, retrying on the fresh map", "key", a.Key(), "attempt", attempts-1)
		}
		var err error
		if from, err = a.storedPrefix(storedRange); err != nil {
			return nil, err
		}
		if from.Addr().Is6() != a.rng.IPv6() {
			return nil, fmt.Errorf("%s holds range %s of the other IP family, configured %s (a changed family order is not re-ranged): %w",
				a.Key(), from, a.rng.Prefix(), bitmap.ErrStoredRangeMismatch)
		}
		var next []byte
		if rr, next, err = a.reranged(ctx, from, storedRange, data, services); err != nil {
			return nil, err
		}
		if a.rerangeBeforeWrite != nil {
			a.rerangeBeforeWrite()
		}
		return next, nil
	})
	if err != nil || !wrote {
		return nil, err
	}
	for _, ip := range rr.Dropped {
		logger.Info("Dropped an allocation outside the new service range", "key", a.Key(), "ip", ip, "from", from, "to", a.rng.Prefix())
	}
	for _, ip := range rr.Added {
		logger.Info("Marked a Service IP that the old map lacked", "key", a.Key(), "ip", ip, "to", a.rng.Prefix())
	}
	logger.Info("Re-ranged the stored allocation map", "key", a.Key(), "from", from, "to", a.rng.Prefix(),
		"kept", rr.Kept, "added", len(rr.Added), "dropped", len(rr.Dropped))
	return rr, nil
}

// reranged computes the new map from the stored map (range from, its range
// field and data) and the Services read with it.
func (a *EtcdAllocator) reranged(ctx context.Context, from netip.Prefix, storedRange string, data []byte, services []*mvccpb.KeyValue) (*Rerange, []byte, error) {
	oldRange, err := subrange.New(from, model.Bitmap)
	if err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored range %s: %w", a.Key(), from, err)
	}
	old, err := NewAllocator(oldRange)
	if err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored range %s: %w", a.Key(), from, err)
	}
	if err := old.Restore(storedRange, data); err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored map: %w", a.Key(), err)
	}
	next, err := bitset.New(int(a.rng.Size()), int(a.rng.StaticSize()))
	if err != nil {
		return nil, nil, err
	}
	rr := &Rerange{From: from, To: a.rng.Prefix()}
	old.bits.ForEach(func(i int) {
		ip := addrOf(oldRange, i)
		if slot, ok := a.rng.Index(ip); ok {
			next.Set(int(slot))
			rr.Kept++
		} else {
			rr.Dropped = append(rr.Dropped, ip)
		}
	})
	logger := klog.FromContext(ctx)
	for _, kv := range services {
		svc, err := etcdlayout.DecodeService(kv.Value)
		if err != nil {
			// An encrypted or foreign value: the kept bits and the repair
			// pass still cover it; refusing to start would help nobody.
			logger.Info("Skipped a Service the re-range cannot read", "key", string(kv.Key), "err", err)
			continue
		}
		for _, ip := range holding.IPs(svc) {
			if slot, ok := a.rng.Index(ip); ok && next.Set(int(slot)) {
				rr.Added = append(rr.Added, ip)
			}
		}
	}
	return rr, next.Bytes(), nil
}
