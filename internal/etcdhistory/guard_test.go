package etcdhistory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
)

const markerKey = "/registry/clusterip-allocator/markers/p"

// newMarker returns a started marker and a KV guarded by it. The client of
// the marker's lease is closed once the lease is granted: the lease outlives
// the test, and its keep-alive stream is one etcd waits for (up to its
// request timeout, 7 s) each time it stops.
func newMarker(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd) (*Marker, clientv3.KV) {
	t.Helper()
	c, leases := etcd.NewClient(t), etcd.NewClient(t)
	m := NewMarker(c.KV, leases.Lease, markerKey, "p")
	if err := m.start(ctx); err != nil {
		t.Fatal(err)
	}
	_ = leases.Close()
	return m, m.Guard(c.KV)
}

// TestGuardPassesAnswersThrough: while etcd's history goes on, a guarded
// write is answered as kv answers it: a put, a delete, a transaction whose
// own compare fails (with its own Else answers only), and one that succeeds.
func TestGuardPassesAnswersThrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	m := NewMarker(c.KV, c.Lease, markerKey, "p")
	kv := m.Guard(c.KV)

	// Before the marker's first write: nothing compared.
	if _, err := kv.Put(ctx, "/k/before", "v"); err != nil {
		t.Fatalf("put before the marker's start: %v", err)
	}
	if err := m.start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := m.check(ctx); err != nil {
			t.Fatal(err)
		}
	}

	put, err := kv.Put(ctx, "/k/a", "1")
	if err != nil {
		t.Fatalf("guarded put: %v", err)
	}
	if put.Header == nil || put.Header.Revision == 0 {
		t.Errorf("guarded put answered without its header: %+v", put)
	}
	lost, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision("/k/a"), "=", put.Header.Revision-1)).
		Then(clientv3.OpPut("/k/a", "2")).
		Else(clientv3.OpGet("/k/a")).
		Commit()
	if err != nil {
		t.Fatalf("guarded transaction whose compare fails: %v", err)
	}
	if lost.Succeeded || len(lost.Responses) != 1 {
		t.Fatalf("lost compare-and-swap answered succeeded=%v with %d answers, want false with its own 1", lost.Succeeded, len(lost.Responses))
	}
	if kvs := lost.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "1" {
		t.Errorf("its Else read %v, want /k/a = 1", kvs)
	}
	won, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision("/k/a"), "=", put.Header.Revision)).
		Then(clientv3.OpPut("/k/a", "2")).
		Commit()
	if err != nil || !won.Succeeded {
		t.Fatalf("guarded compare-and-swap: succeeded=%v, %v", won != nil && won.Succeeded, err)
	}
	del, err := kv.Delete(ctx, "/k/a")
	if err != nil || del.Deleted != 1 {
		t.Fatalf("guarded delete: %+v, %v", del, err)
	}
	if resp, err := kv.Do(ctx, clientv3.OpPut("/k/b", "1")); err != nil || resp.Put() == nil {
		t.Fatalf("guarded Do(put): %+v, %v", resp, err)
	}
	if m.Err() != nil {
		t.Errorf("a restore reported while etcd's history went on: %v", m.Err())
	}
}

// TestGuardRefusesWritesAfterRestore restores etcd under a marker that
// advanced after the backup, the three ways an operator restores: every
// guarded write is then refused by etcd itself (nothing lands), answered
// with ErrRestored, and the restore is reported at once; the marker's own
// check finds it too.
func TestGuardRefusesWritesAfterRestore(t *testing.T) {
	t.Parallel()
	type restore struct {
		name   string
		backup func(*testing.T, context.Context, *etcdtest.Etcd) func()
	}
	snapshot := func(how etcdtest.SnapshotRestore) func(*testing.T, context.Context, *etcdtest.Etcd) func() {
		return func(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd) func() {
			path := etcd.Snapshot(t, ctx)
			return func() { etcd.RestoreSnapshot(t, path, how) }
		}
	}
	for _, r := range []restore{
		{"cold backup", func(t *testing.T, _ context.Context, etcd *etcdtest.Etcd) func() {
			dir := etcd.ColdBackup(t)
			return func() { etcd.RestoreColdBackup(t, dir) }
		}},
		{"snapshot", snapshot(etcdtest.SnapshotRestore{})},
		{"snapshot, revision bumped and compacted", snapshot(etcdtest.SnapshotRestore{RevisionBump: 1_000_000, MarkCompacted: true})},
	} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			etcd := etcdtest.New(t)
			m, kv := newMarker(t, ctx, etcd)
			if _, err := kv.Put(ctx, "/k/before-backup", "v"); err != nil {
				t.Fatal(err)
			}
			restoreBackup := r.backup(t, ctx, etcd)
			// The process writes after the backup and its marker moves on.
			for i := range 3 {
				if err := retry(ctx, func() error { return m.check(ctx) }); err != nil {
					t.Fatalf("check %d after the backup: %v", i, err)
				}
				if _, err := kv.Put(ctx, fmt.Sprintf("/k/after-%d", i), "v"); err != nil {
					t.Fatalf("guarded put after the backup: %v", err)
				}
			}
			restoreBackup()

			writes := map[string]func() error{
				"put": func() error { _, err := kv.Put(ctx, "/k/stale-put", "v"); return err },
				"create": func() error {
					_, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("/k/stale-create"), "=", 0)).
						Then(clientv3.OpPut("/k/stale-create", "v")).Commit()
					return err
				},
				"delete": func() error { _, err := kv.Delete(ctx, "/k/before-backup"); return err },
			}
			for name, write := range writes {
				err := retry(ctx, write)
				if !errors.Is(err, ErrRestored) {
					t.Errorf("guarded %s after the restore: %v, want %v", name, err, ErrRestored)
				}
			}
			select {
			case <-m.Restored():
				t.Logf("reported: %v", m.Err())
			default:
				t.Error("a write refused for a restore did not report it")
			}
			resp, err := etcd.Client().Get(ctx, "/k/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				if k := string(kv.Key); k != "/k/before-backup" {
					t.Errorf("%s stored after the restore", k)
				}
			}
			if len(resp.Kvs) != 1 {
				t.Errorf("%d keys under /k/ after the restore, want /k/before-backup alone", len(resp.Kvs))
			}
			if err := retry(ctx, func() error { return m.check(ctx) }); !errors.Is(err, ErrRestored) {
				t.Errorf("the marker's check after the restore: %v, want %v", err, ErrRestored)
			}
		})
	}
}

// retry calls f until it succeeds or finds a restore: other errors are etcd
// coming back after a restart. Bounded by ctx.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || errors.Is(err, ErrRestored) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
