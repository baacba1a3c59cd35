package embedetcd

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestInProcessClient: the in-process client reaches a member that demands a
// client certificate on its network port without one, and sees the same
// data, revisions, watches and compare-and-swap as a gRPC client of the
// member, in both directions; it ends with Close.
func TestInProcessClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pki, err := EnsurePKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true, PKI: &pki})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tlsCfg, err := s.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	remote, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	local := s.InProcessClient()

	// A watch in process sees a write over gRPC, at the revision that write got.
	watch := local.Watch(ctx, "/w/", clientv3.WithPrefix())
	put, err := remote.Put(ctx, "/w/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-watch:
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		if len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "1" || resp.Events[0].Kv.ModRevision != put.Header.Revision {
			t.Fatalf("watch in process got %v, want /w/a=1 at revision %d", resp.Events, put.Header.Revision)
		}
	case <-ctx.Done():
		t.Fatal("no watch event in process for a write over gRPC")
	}

	// A compare-and-swap in process: the stale one fails and reads the
	// current value in its Else branch; the fresh one passes and is what a
	// gRPC client reads.
	stale := clientv3.Compare(clientv3.ModRevision("/w/a"), "=", put.Header.Revision-1)
	txn, err := local.Txn(ctx).If(stale).Then(clientv3.OpPut("/w/a", "2")).Else(clientv3.OpGet("/w/a")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if txn.Succeeded || string(txn.Responses[0].GetResponseRange().Kvs[0].Value) != "1" {
		t.Fatalf("stale compare-and-swap in process: succeeded=%v, responses %v", txn.Succeeded, txn.Responses)
	}
	fresh := clientv3.Compare(clientv3.ModRevision("/w/a"), "=", put.Header.Revision)
	txn, err = local.Txn(ctx).If(fresh).Then(clientv3.OpPut("/w/a", "2")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("fresh compare-and-swap in process: succeeded=%v, %v", txn.Succeeded, err)
	}
	got, err := remote.Get(ctx, "/w/a")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Kvs[0].Value) != "2" || got.Kvs[0].ModRevision != txn.Header.Revision {
		t.Fatalf("gRPC read after the write in process: %v, want /w/a=2 at revision %d", got.Kvs, txn.Header.Revision)
	}

	// A write whose context has ended is carried out and answered with its
	// outcome, not with the context's error (etcd would propose it anyway).
	ended, end := context.WithCancel(ctx)
	end()
	late, err := local.Put(ended, "/w/late", "x")
	if err != nil {
		t.Fatalf("write in process with an ended context: %v, want it carried out", err)
	}
	if got, err := remote.Get(ctx, "/w/late"); err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != late.Header.Revision {
		t.Fatalf("gRPC read of the write with an ended context: %v %v", got, err)
	}

	// etcd's own errors come back as over gRPC.
	if _, err := local.Get(ctx, "/w/a", clientv3.WithRev(got.Header.Revision+100)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("read of a future revision in process: %v, want %v", err, rpctypes.ErrFutureRev)
	}

	// A client made with clientv3.NewCtxClient (as v3client's is) answers
	// Close with its cancelled context: nothing went wrong.
	if err := local.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := local.Get(ctx, "/w/a"); err == nil {
		t.Fatal("read through a closed in-process client succeeded")
	}
	// Closing the client ends only the client.
	if _, err := remote.Get(ctx, "/w/a"); err != nil {
		t.Fatalf("gRPC read after the in-process client closed: %v", err)
	}
}
