package integration

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestEtcdRestoredUnderServer: etcd restored from a cold backup under a
// running server (its revision goes back) makes the server stop on its own
// with ErrEtcdRestored, and no write it makes from its caches, which still
// hold what the restore undid, lands meanwhile: creates sent to it until it
// stops all fail. Started again on the restored etcd it serves what etcd
// holds: the Services made after the backup are gone, new creates get
// distinct addresses, and one repair pass finds nothing at all to fix, not
// even a leak.
func TestEtcdRestoredUnderServer(t *testing.T) {
	t.Parallel()
	forEachModel(t, testEtcdRestoredUnderServer)
}

func testEtcdRestoredUnderServer(t *testing.T, m string) {
	etcd := etcdtest.New(t)
	ctx := testContext(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	opts := testserver.Options{
		ServiceRange: "10.96.0.0/24", Model: m, Etcd: etcd, DataDir: dataDir, WithRepair: true,
		Configure: func(cfg *apiserver.Config) { cfg.RestoreCheckInterval = 200 * time.Millisecond },
	}
	srv := testserver.Start(t, opts)
	for i := range 5 {
		mustCreate(t, ctx, srv.Client, newService(fmt.Sprintf("before-%d", i)))
	}

	backup := etcd.ColdBackup(t)
	for i := range 10 {
		mustCreate(t, ctx, srv.Client, newService(fmt.Sprintf("after-%d", i)))
	}
	// The server must have checked etcd's history since the backup: a
	// restore to a point after its last check looks like no restore at all
	// (its marker and the revision are what it last saw), whatever it
	// wrote since. Here its check's connection may still be in its
	// reconnect backoff after the backup's stop while the creates go
	// through, so wait for its marker to move on.
	waitMarkerAdvance(t, ctx, etcd)

	etcd.RestoreColdBackup(t, backup)
	start := time.Now()
	var exited bool
	var err error
	sent := 0
	for i := 0; !exited && time.Since(start) < 30*time.Second; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, cerr := srv.Client.CoreV1().Services("default").Create(cctx, newService(fmt.Sprintf("stale-%d", i)), metav1.CreateOptions{})
		cancel()
		sent++
		if cerr == nil {
			t.Errorf("stale-%d created by the server left running on the restored etcd", i)
		}
		exited, err = srv.WaitExit(20 * time.Millisecond)
	}
	if !exited {
		t.Fatal("the server kept running on an etcd restored under it")
	}
	t.Logf("%d creates sent to the server before it stopped", sent)
	if !errors.Is(err, apiserver.ErrEtcdRestored) {
		t.Fatalf("the server stopped with %v, want ErrEtcdRestored", err)
	}
	t.Logf("stopped %v after the restored etcd was up: %v", time.Since(start).Round(time.Millisecond), err)

	// Started again (as a supervisor would), it serves the restored state.
	srv = testserver.Start(t, opts)
	for i := range 10 {
		_, err := srv.Client.CoreV1().Services("default").Get(ctx, fmt.Sprintf("after-%d", i), metav1.GetOptions{})
		if err == nil {
			t.Errorf("after-%d, created after the backup, exists after the restore", i)
		}
	}
	for i := range 10 {
		mustCreate(t, ctx, srv.Client, newService(fmt.Sprintf("again-%d", i)))
	}
	list, err := srv.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, svc := range list.Items {
		if other, dup := byIP[svc.Spec.ClusterIP]; dup {
			t.Errorf("%s held by %s and %s", svc.Spec.ClusterIP, other, svc.Name)
		}
		byIP[svc.Spec.ClusterIP] = svc.Name
	}
	if want := 1 + 5 + 10; len(list.Items) != want {
		t.Errorf("%d Services after the restore and 10 creates, want %d", len(list.Items), want)
	}
	// Nothing to fix, not even a leak: in the moments before it stopped,
	// the server's repair and allocations could act on what it cached
	// before the restore, but etcd refused every write they made.
	rep := repairOnce(t, ctx, srv, m, etcd)
	for _, p := range rep.Problems {
		t.Errorf("left to fix after the restore: %+v", p)
	}
}

// waitMarkerAdvance waits until the server's restore marker (the only one
// under the prefix) is at a higher version than now.
func waitMarkerAdvance(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd) {
	t.Helper()
	prefix := etcdlayout.Layout{}.RestoreMarker("")
	read := func() int64 {
		resp, err := etcd.Client().Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("restore markers under %s: %v (%d keys, want 1)", prefix, err, len(resp.Kvs))
		}
		return resp.Kvs[0].Version
	}
	before := read()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, false, func(context.Context) (bool, error) {
		return read() > before, nil
	})
	if err != nil {
		t.Fatalf("the server's restore marker stayed at version %d: %v", before, err)
	}
}

// repairOnce makes one pass of model m's repair, as the standalone job
// would, and returns its report.
func repairOnce(t *testing.T, ctx context.Context, srv *testserver.Server, m string, etcd *etcdtest.Etcd) *report.Report {
	t.Helper()
	b, err := ipallocator.Open(ctx, ipallocator.Config{
		Model: model.Name(m), Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")},
		Etcd: etcd.Client(), Client: srv.Client,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Repair(ipallocator.RepairConfig{Options: repair.Options{Client: srv.Client}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
