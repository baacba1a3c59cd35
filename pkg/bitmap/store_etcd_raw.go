package bitmap

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/bitset"
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
}

// Exists reports whether the key was present.
func (m StoredMap) Exists() bool { return m.Revision != 0 }

// ReadStored reads the stored map directly from etcd (a linearizable read),
// bypassing the allocator's cache. A missing key is not an error: the result
// has Revision 0. A value that is not a RangeAllocation of this range is.
func (a *Store) ReadStored(ctx context.Context) (StoredMap, error) {
	resp, err := a.client.Get(ctx, a.key)
	if err != nil {
		return StoredMap{}, fmt.Errorf("read %s: %w", a.key, err)
	}
	if len(resp.Kvs) == 0 {
		return StoredMap{}, nil
	}
	_, data, err := a.decode(resp.Kvs[0].Value)
	if err != nil {
		return StoredMap{}, err
	}
	if err := a.checkData(data); err != nil {
		return StoredMap{}, err
	}
	return StoredMap{Data: data, Revision: resp.Kvs[0].ModRevision}, nil
}

// CompareAndWrite replaces the stored map with data if its ModRevision is
// still revision (0: only if the key does not exist), in one transaction. It
// returns ErrConflict otherwise, and the new revision on success. Allocations
// in flight on any instance are never lost: they either landed before (and
// the compare fails) or they conflict with this write and retry on top of it.
func (a *Store) CompareAndWrite(ctx context.Context, data []byte, revision int64) (int64, error) {
	if err := a.checkData(data); err != nil {
		return 0, err
	}
	value, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), data)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", a.key, err)
	}
	resp, err := a.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(a.key), "=", revision)).
		Then(clientv3.OpPut(a.key, string(value))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", a.key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("write %s at revision %d: %w", a.key, revision, ErrConflict)
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
