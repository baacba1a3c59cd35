package bitmap

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Remap computes the data of a re-ranged map, in the store's space, from the
// stored map of another range (its range field and data) and the keys
// RerangeWith read with it. An error ends the re-range and is returned as it
// is.
type Remap func(storedRange string, data []byte, also []*mvccpb.KeyValue) ([]byte, error)

// RerangeWith rewrites a stored map of another range for the store's space
// in one CAS write on what it read (ModRevision and stamp): a lost compare
// reads again and calls remap again on the fresh value, so a concurrent
// allocation by a replica on the old range is never lost. The map and, when
// alsoPrefix is not empty, every key under alsoPrefix are read in one
// read-only transaction, so remap sees them at one revision. A stored map
// that already matches the space is left alone. It reports whether it wrote;
// a missing key is an error.
func (a *Store) RerangeWith(ctx context.Context, alsoPrefix string, remap Remap) (bool, error) {
	read := a.readOps()
	if alsoPrefix != "" {
		read = append(read, clientv3.OpGet(alsoPrefix, clientv3.WithPrefix()))
	}
	for attempt := 0; attempt < a.opts.MaxAttempts; attempt++ {
		resp, err := a.client.Txn(ctx).
			// no compare: the map, its stamp and the keys under alsoPrefix,
			// read at one revision
			Then(read...).
			Commit()
		if err != nil {
			return false, fmt.Errorf("re-range %s: read: %w", a.key, err)
		}
		stored := stateOf(resp.Responses[0], resp.Responses[1])
		if !stored.exists() {
			return false, fmt.Errorf("re-range %s: the key vanished", a.key)
		}
		ra, err := etcdlayout.DecodeRangeAllocation(stored.value)
		if err != nil {
			return false, fmt.Errorf("value at %s is not a valid RangeAllocation: %w", a.key, err)
		}
		if a.space.Matches(ra.Range) {
			return false, nil
		}
		var also []*mvccpb.KeyValue
		if alsoPrefix != "" {
			also = resp.Responses[2].GetResponseRange().GetKvs()
		}
		data, err := remap(ra.Range, ra.Data, also)
		if err != nil {
			return false, err
		}
		value, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), data)
		if err != nil {
			return false, fmt.Errorf("re-range %s: %w", a.key, err)
		}
		ops, _ := a.putOps(value)
		put, err := a.client.Txn(ctx).
			// the map is still the one remap was given (revision and stamp)
			If(a.unchanged(stored)...).
			// write the re-ranged map with a fresh stamp
			Then(ops...).
			// no Else: a lost compare reads everything again, next attempt
			Commit()
		if err != nil {
			return false, fmt.Errorf("re-range %s: write: %w", a.key, err)
		}
		if put.Succeeded {
			a.stats.writes.Add(1)
			a.stats.bytesWritten.Add(uint64(len(value)))
			return true, nil
		}
		a.stats.conflicts.Add(1)
	}
	return false, fmt.Errorf("re-range %s: %d attempts lost to concurrent writers", a.key, a.opts.MaxAttempts)
}

// SlotMap maps the slots of a stored map of another range onto a store's
// space, for RerangeSlots.
type SlotMap struct {
	// Slots is the number of slots of the stored range.
	Slots int
	// To maps a slot of the stored range to the store's slot, false when the
	// value it stands for is outside the store's space.
	To func(old int) (int, bool)
}

// RerangeSlots is RerangeWith slot by slot: from reads the stored range
// field; it fails for a range that cannot be carried over. Every set slot
// that To maps is kept; the others are returned (as slots of the stored
// range). A stored map that already matches is left alone.
func (a *Store) RerangeSlots(ctx context.Context, from func(storedRange string) (SlotMap, error)) (dropped []int, err error) {
	wrote, err := a.RerangeWith(ctx, "", func(storedRange string, data []byte, _ []*mvccpb.KeyValue) ([]byte, error) {
		sm, err := from(storedRange)
		if err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, storedRange, err)
		}
		old, err := bitset.New(sm.Slots, 0)
		if err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, storedRange, err)
		}
		if err := old.SetBytes(data); err != nil {
			return nil, fmt.Errorf("re-range %s from %q: %w", a.key, storedRange, err)
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
		return next.Bytes(), nil
	})
	if err != nil || !wrote {
		return nil, err
	}
	return dropped, nil
}
