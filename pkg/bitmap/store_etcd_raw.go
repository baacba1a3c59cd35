package bitmap

import (
	"context"
	"errors"
	"fmt"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// ErrConflict is returned by CompareAndWrite when the stored map changed since
// the revision the caller read.
var ErrConflict = errors.New("the stored allocation map changed since it was read")

// StoredMap is the RangeAllocation as etcd holds it, for code that reasons
// about the whole map at once (repair, migration).
type StoredMap struct {
	// Data is the bitmap in RangeAllocation.data format.
	Data []byte
	// Revision is the key's ModRevision; 0 when the key does not exist.
	Revision int64
	// stamp is the map's stamp as read, for CompareAndWrite's compare.
	stamp string
}

// Exists reports whether the key was present.
func (m StoredMap) Exists() bool { return m.Revision != 0 }

// ReadStored reads the stored map directly from etcd (a linearizable read),
// bypassing the allocator's cache. A missing key is not an error: the result
// has Revision 0. A value that is not a RangeAllocation of this range is.
func (a *Store) ReadStored(ctx context.Context) (StoredMap, error) {
	resp, err := a.client.Txn(ctx).
		// no compare: the map and its stamp, read at one revision
		Then(a.readOps()...).
		Commit()
	if err != nil {
		return StoredMap{}, fmt.Errorf("read %s: %w", a.key, err)
	}
	stored := stateOf(resp.Responses[0], resp.Responses[1])
	if !stored.exists() {
		return StoredMap{}, nil
	}
	_, data, err := a.decode(stored.value)
	if err != nil {
		return StoredMap{}, err
	}
	if err := a.checkData(data); err != nil {
		return StoredMap{}, err
	}
	return StoredMap{Data: data, Revision: stored.rev, stamp: stored.stamp}, nil
}

// CompareAndWrite replaces the stored map with data if the key still holds
// base, the map ReadStored returned (a base that does not exist: only if the
// key still does not), in one transaction. It returns ErrConflict otherwise,
// and the new revision on success. Allocations in flight on any instance are
// never lost: they either landed before (and the compare fails) or they
// conflict with this write and retry on top of it. The compare is on the
// stamp as well as the revision (stamp.go): a repair pass that spans an etcd
// restore must not write its map over the restored one.
func (a *Store) CompareAndWrite(ctx context.Context, data []byte, base StoredMap) (int64, error) {
	if err := a.checkData(data); err != nil {
		return 0, err
	}
	value, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), data)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", a.key, err)
	}
	ops, _ := a.putOps(value)
	resp, err := a.client.Txn(ctx).
		// the key still holds base (revision and stamp), or is still absent
		If(a.unchanged(mapState{rev: base.Revision, stamp: base.stamp})...).
		// write the caller's map with a fresh stamp
		Then(ops...).
		// no Else: a lost compare is ErrConflict, and the caller reads again
		Commit()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", a.key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("write %s at revision %d: %w", a.key, base.Revision, ErrConflict)
	}
	return resp.Header.Revision, nil
}

// checkData verifies that data marks no slot beyond the range.
func (a *Store) checkData(data []byte) error {
	probe, err := bitset.New(a.space.Slots(), a.space.StaticSlots())
	if err != nil {
		return err
	}
	if err := probe.SetBytes(data); err != nil {
		return fmt.Errorf("value at %s: %w", a.key, err)
	}
	return nil
}
