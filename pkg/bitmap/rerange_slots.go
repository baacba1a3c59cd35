package bitmap

import (
	"context"
	"fmt"

	"github.com/allocator/allocator/pkg/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// SlotMap maps the slots of a stored map of another range onto a store's
// space, for RerangeSlots.
type SlotMap struct {
	// Slots is the number of slots of the stored range.
	Slots int
	// To maps a slot of the stored range to the store's slot, false when the
	// value it stands for is outside the store's space.
	To func(old int) (int, bool)
}

// RerangeSlots rewrites a stored map of another range for the store's space
// in one CAS write on the ModRevision it read (a lost compare recomputes from
// the fresh value, so a concurrent allocation by a replica on the old range
// is never lost). from reads the stored range field; it fails for a range
// that cannot be carried over. Every set slot that To maps is kept; the
// others are returned (as slots of the stored range). A stored map that
// already matches is left alone.
func (a *Store) RerangeSlots(ctx context.Context, from func(storedRange string) (SlotMap, error)) (dropped []int, err error) {
	for attempt := 0; attempt < a.opts.MaxAttempts; attempt++ {
		resp, err := a.client.Txn(ctx).Then(a.readOps()...).Commit()
		if err != nil {
			return nil, fmt.Errorf("re-range %s: read: %w", a.key, err)
		}
		stored := stateOf(resp.Responses[0], resp.Responses[1])
		if !stored.exists() {
			return nil, fmt.Errorf("re-range %s: the key vanished", a.key)
		}
		ra, err := etcdlayout.DecodeRangeAllocation(stored.value)
		if err != nil {
			return nil, fmt.Errorf("value at %s is not a valid RangeAllocation: %w", a.key, err)
		}
		if a.space.Matches(ra.Range) {
			return nil, nil
		}
		sm, err := from(ra.Range)
		if err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, ra.Range, err)
		}
		old, err := bitset.New(sm.Slots, 0)
		if err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, ra.Range, err)
		}
		if err := old.SetBytes(ra.Data); err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, ra.Range, err)
		}
		next, err := bitset.New(a.space.Slots(), a.space.StaticSlots())
		if err != nil {
			return nil, err
		}
		dropped = dropped[:0]
		old.ForEach(func(i int) {
			if j, ok := sm.To(i); ok {
				next.Set(j)
			} else {
				dropped = append(dropped, i)
			}
		})
		value, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), next.Bytes())
		if err != nil {
			return nil, fmt.Errorf("re-range %s: %w", a.key, err)
		}
		ops, _ := a.putOps(value)
		put, err := a.client.Txn(ctx).If(a.unchanged(stored)...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("re-range %s: write: %w", a.key, err)
		}
		if put.Succeeded {
			a.stats.writes.Add(1)
			a.stats.bytesWritten.Add(uint64(len(value)))
			return dropped, nil
		}
		a.stats.conflicts.Add(1)
	}
	return nil, fmt.Errorf("re-range %s: %d attempts lost to concurrent writers", a.key, a.opts.MaxAttempts)
}
