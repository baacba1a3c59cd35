package etcdhistory

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
)

func TestPositionFollowedBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		seen, now position
		restored  bool
	}{
		{"first read", position{}, position{clusterID: 7, revision: 100}, false},
		{"same position", position{7, 100}, position{7, 100}, false},
		{"forward", position{7, 100}, position{7, 250}, false},
		{"revision back (cold copy, snapshot restore)", position{7, 250}, position{7, 120}, true},
		{"another cluster (snapshot restore)", position{7, 250}, position{9, 900}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.seen.followedBy(tt.now)
			if got := errors.Is(err, ErrRestored); got != tt.restored {
				t.Errorf("followedBy = %v, restored %v, want %v", err, got, tt.restored)
			}
		})
	}
}

// landThenFailKV makes the next transaction commit and then report an
// error, as etcd does for a write it applied while its database crossed the
// quota ("database space exceeded" after the apply, NOSPACE raised), or as a
// client timeout after the request reached etcd.
type landThenFailKV struct {
	clientv3.KV
	fail bool
}

func (k *landThenFailKV) Txn(ctx context.Context) clientv3.Txn {
	return &landThenFailTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type landThenFailTxn struct {
	clientv3.Txn
	kv *landThenFailKV
}

func (t *landThenFailTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *landThenFailTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *landThenFailTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *landThenFailTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.kv.fail {
		t.kv.fail = false
		return nil, rpctypes.ErrNoSpace
	}
	return resp, err
}

// TestMarkerAmbiguousWrite: a marker write that landed but failed (etcd
// crossing its quota answers "database space exceeded" for a write it
// applied; a client timeout after the request reached etcd) is no restore:
// the next check finds the marker one version ahead and takes it. A marker
// really set back is a restore.
func TestMarkerAmbiguousWrite(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	client := etcd.NewClient(t)
	kv := &landThenFailKV{KV: client.KV}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := NewMarker(kv, client.Lease, "/registry/test-marker/p", "p")
	if err := m.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.check(ctx); err != nil {
		t.Fatalf("first check: %v", err)
	}
	kv.fail = true
	if err := m.check(ctx); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("check whose write landed and failed: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	for i := range 3 {
		if err := m.check(ctx); err != nil {
			t.Fatalf("check %d after a write that landed and failed: %v", i+1, err)
		}
	}
	// 1 at the start, 2, 3 (landed and failed, taken by the next check), 4, 5.
	if got := m.confirmed.Load(); got != 5 {
		t.Errorf("marker version %d, want 5", got)
	}

	// Set back (deleted and written twice: version 2): a restore.
	if _, err := etcd.Client().Delete(ctx, m.key); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := etcd.Client().Put(ctx, m.key, "p"); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.check(ctx); !errors.Is(err, ErrRestored) {
		t.Fatalf("check after the marker was set back: %v, want %v", err, ErrRestored)
	}
}
