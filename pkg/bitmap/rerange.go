package bitmap

import (
	"context"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/holding"
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
//   - Every address a Service in etcd holds (pkg/holding) that the new range
//     contains is set too, read in the same etcd snapshot as the map. Why: an
//     address outside the old map (dropped by an earlier shrink, then grown
//     back) may still be held by a Service; without this it would be free
//     until the first repair pass and a create in between could hand it out
//     twice.
//   - Bits outside the new range are dropped and each one is logged; the
//     Services holding them are reported by the bitmap repair
//     (ClusterIPOutOfRange), as upstream does.
//   - A stored map of the other IP family is refused (ErrStoredRangeMismatch):
//     that is a swap of the cluster's family order, where every allocation of
//     both keys would be dropped at once.

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
	if a.opts.ServicesPrefix != "" {
		return a.opts.ServicesPrefix
	}
	return etcdlayout.LayoutOfRange(a.key).ServicesPrefix()
}

// storedPrefix reads the range a stored value is for. It is nil-error only
// for a RangeAllocation whose range is a CIDR.
func (a *EtcdAllocator) storedPrefix(value []byte) (netip.Prefix, error) {
	ra, err := etcdlayout.DecodeRangeAllocation(value)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("value at %s is not a valid RangeAllocation: %w", a.key, err)
	}
	p, err := netip.ParsePrefix(ra.Range)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s holds range %q, configured %s: %w", a.key, ra.Range, a.rng.Prefix(), ErrStoredRangeMismatch)
	}
	return p, nil
}

// rerange rewrites the stored map, which holds another range of the same
// family, for the configured range (see the invariants above). It returns
// nil when the stored map already is for the configured range.
func (a *EtcdAllocator) rerange(ctx context.Context) (*Rerange, error) {
	logger := klog.FromContext(ctx)
	for attempt := 0; attempt < a.opts.MaxAttempts; attempt++ {
		// One read-only transaction: the map and the Services at one revision.
		resp, err := a.client.Txn(ctx).Then(append(a.readOps(),
			clientv3.OpGet(a.servicesPrefix(), clientv3.WithPrefix()))...,
		).Commit()
		if err != nil {
			return nil, fmt.Errorf("re-range %s: read: %w", a.key, err)
		}
		stored := stateOf(resp.Responses[0], resp.Responses[1])
		if !stored.exists() {
			return nil, fmt.Errorf("re-range %s: the key vanished", a.key)
		}
		from, err := a.storedPrefix(stored.value)
		if err != nil {
			return nil, err
		}
		if from == a.rng.Prefix() {
			return nil, nil
		}
		if from.Addr().Is6() != a.rng.IPv6() {
			return nil, fmt.Errorf("%s holds range %s of the other IP family, configured %s (a changed family order is not re-ranged): %w",
				a.key, from, a.rng.Prefix(), ErrStoredRangeMismatch)
		}
		var services []storedValue
		for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
			services = append(services, storedValue{key: string(kv.Key), value: kv.Value})
		}
		rr, data, err := a.reranged(ctx, from, stored.value, services)
		if err != nil {
			return nil, err
		}
		value, err := etcdlayout.EncodeRangeAllocation(a.rng.Prefix().String(), data)
		if err != nil {
			return nil, fmt.Errorf("re-range %s: %w", a.key, err)
		}
		if a.rerangeBeforeWrite != nil {
			a.rerangeBeforeWrite()
		}
		ops, _ := a.putOps(value)
		put, err := a.client.Txn(ctx).If(a.unchanged(stored)...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("re-range %s: write: %w", a.key, err)
		}
		if !put.Succeeded {
			a.stats.conflicts.Add(1)
			logger.V(2).Info("Re-range lost a compare, retrying on the fresh map", "key", a.key, "attempt", attempt+1)
			continue
		}
		a.stats.writes.Add(1)
		a.stats.bytesWritten.Add(uint64(len(value)))
		for _, ip := range rr.Dropped {
			logger.Info("Dropped an allocation outside the new service range", "key", a.key, "ip", ip, "from", from, "to", a.rng.Prefix())
		}
		for _, ip := range rr.Added {
			logger.Info("Marked a Service IP that the old map lacked", "key", a.key, "ip", ip, "to", a.rng.Prefix())
		}
		logger.Info("Re-ranged the stored allocation map", "key", a.key, "from", from, "to", a.rng.Prefix(),
			"kept", rr.Kept, "added", len(rr.Added), "dropped", len(rr.Dropped))
		return rr, nil
	}
	return nil, fmt.Errorf("re-range %s: %d attempts lost to concurrent writers", a.key, a.opts.MaxAttempts)
}

// storedValue is one etcd key and its value.
type storedValue struct {
	key   string
	value []byte
}

// reranged computes the new map from the stored value (range from) and the
// Services read with it.
func (a *EtcdAllocator) reranged(ctx context.Context, from netip.Prefix, value []byte, services []storedValue) (*Rerange, []byte, error) {
	oldRange, err := subrange.New(from, model.Bitmap)
	if err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored range %s: %w", a.key, from, err)
	}
	old, err := NewAllocator(oldRange)
	if err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored range %s: %w", a.key, from, err)
	}
	ra, err := etcdlayout.DecodeRangeAllocation(value)
	if err != nil {
		return nil, nil, fmt.Errorf("value at %s is not a valid RangeAllocation: %w", a.key, err)
	}
	if err := old.Restore(ra.Range, ra.Data); err != nil {
		return nil, nil, fmt.Errorf("re-range %s: stored map: %w", a.key, err)
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
		svc, err := etcdlayout.DecodeService(kv.value)
		if err != nil {
			// An encrypted or foreign value: the kept bits and the repair
			// pass still cover it; refusing to start would help nobody.
			logger.Info("Skipped a Service the re-range cannot read", "key", kv.key, "err", err)
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
