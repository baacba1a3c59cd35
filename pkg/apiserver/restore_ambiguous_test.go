package apiserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
)

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

// TestRestoreMarkerAmbiguousWrite: a marker write that landed but failed
// (etcd crossing its quota answers "database space exceeded" for a write it
// applied) is no restore. The check after it took the marker one ahead of
// what the process believed it wrote for a restore, and the server exited
// 1 (reproduced with client timeouts of 50 µs: "this server's marker holds
// 5, it wrote 4"). A marker really set back is still a restore.
func TestRestoreMarkerAmbiguousWrite(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	client := etcd.NewClient(t)
	kv := &landThenFailKV{KV: client.KV}
	client.KV = kv
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &restoreMarker{client: client, process: "p", key: "/registry/test-marker/p"}
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
	// 1 at the start, 2, 3 (landed and failed, adopted by the next check), 4, 5.
	if m.count != 5 {
		t.Errorf("marker count %d, want 5", m.count)
	}

	// A restore sets the marker back: still caught.
	if _, err := etcd.Client().Put(ctx, m.key, m.value(2)); err != nil {
		t.Fatal(err)
	}
	if err := m.check(ctx); !errors.Is(err, ErrEtcdRestored) {
		t.Fatalf("check after the marker was set back: %v, want %v", err, ErrEtcdRestored)
	}
}
