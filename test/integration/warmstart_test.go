package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// warmServer starts an IPAddress-model server on e that carries its
// informers' stores across restarts in warmDir, with a repair that acts
// within seconds (its leak grace, and the write leases a stopped server
// leaves, which hold its leaks until they expire).
func warmServer(t *testing.T, e *etcdtest.Etcd, dataDir, warmDir string) *testserver.Server {
	t.Helper()
	return testserver.Start(t, testserver.Options{
		Etcd: e, DataDir: dataDir, Model: "ipaddress", ServiceRange: "10.0.0.0/24", WithRepair: true,
		Configure: func(cfg *apiserver.Config) {
			cfg.WarmStart = apiserver.LoadWarmStart(warmDir)
			cfg.RepairGrace = time.Second
			cfg.RepairInterval = time.Second
			cfg.WriteLeaseTTL = 2 * time.Second
		},
	})
}

var warmObjects = regexp.MustCompile(`(?m)^allocator_warm_start_objects\{resource="(\w+)"\} (\d+)$`)

// warmStarted returns allocator_warm_start_objects by resource.
func warmStarted(t *testing.T, ctx context.Context, s *testserver.Server) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, m := range warmObjects.FindAllStringSubmatch(scrapeMetrics(t, ctx, s.Client), -1) {
		got[m[1]] = m[2]
	}
	return got
}

// between reports whether the number n is in [lo, hi].
func between(n string, lo, hi int) bool {
	v, err := strconv.Atoi(n)
	return err == nil && lo <= v && v <= hi
}

// TestWarmStartSeesChangesWhileStopped: a server stopped cleanly leaves its
// Service and IPAddress stores in its warm-start files; the next start
// takes them from there (the metric says how many) and watches etcd from
// their version, so it sees what changed in etcd while it was stopped: a
// Service deleted behind its back leaves an IPAddress its repair frees, and
// an IPAddress deleted behind its back is one its repair makes again. A
// store taken as it was, without the changes, would do neither.
func TestWarmStartSeesChangesWhileStopped(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	dataDir, warmDir := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "warm")
	s := warmServer(t, e, dataDir, warmDir)
	if got := warmStarted(t, ctx, s); got["services"] != "0" || got["ipaddresses"] != "0" {
		t.Errorf("a first start took %v objects from warm-start files, want 0", got)
	}
	ips := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		ips[name] = mustCreate(t, ctx, s.Client, newService(name)).Spec.ClusterIP
	}
	s.Stop()
	for _, file := range []string{"services", "ipaddresses"} {
		if _, err := os.Stat(filepath.Join(warmDir, file)); err != nil {
			t.Fatalf("no warm-start file after a clean stop: %v", err)
		}
	}

	layout := etcdlayout.Layout{Prefix: etcdlayout.DefaultPrefix}
	if _, err := e.Client().Delete(ctx, layout.Service("default", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Delete(ctx, layout.IPAddress(ips["c"])); err != nil {
		t.Fatal(err)
	}

	s = warmServer(t, e, dataDir, warmDir)
	// What the caches held at the stop: a, b, c and default/kubernetes, or
	// fewer when a create's event had not reached them yet (the watch
	// from the files' version brings it).
	if got := warmStarted(t, ctx, s); !between(got["services"], 1, 4) || !between(got["ipaddresses"], 1, 4) {
		t.Errorf("the restart took %v objects from its warm-start files, want 1 to 4 of each", got)
	}
	if entries, _ := os.ReadDir(warmDir); len(entries) != 0 {
		t.Errorf("warm-start files left after the start read them: %v", entries)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, errB := s.Client.NetworkingV1().IPAddresses().Get(ctx, ips["b"], metav1.GetOptions{})
		_, errC := s.Client.NetworkingV1().IPAddresses().Get(ctx, ips["c"], metav1.GetOptions{})
		return apierrors.IsNotFound(errB) && errC == nil, nil
	})
	if err != nil {
		t.Fatalf("the repair did not free %s (Service b deleted while stopped) and make %s again (its IPAddress deleted while stopped): %v",
			ips["b"], ips["c"], err)
	}
}

// TestWarmStartRefusedAfterRestore: warm-start files written beside an etcd
// that was then restored from a backup taken before the shutdown are not
// used (the start lists), even with the restore's revisions bumped past
// theirs: the store would describe Services the restored etcd never had.
func TestWarmStartRefusedAfterRestore(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	dataDir, warmDir := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "warm")
	s := warmServer(t, e, dataDir, warmDir)
	mustCreate(t, ctx, s.Client, newService("a"))
	snapshot := e.Snapshot(t, ctx)
	mustCreate(t, ctx, s.Client, newService("b"))
	s.Stop()

	e.RestoreSnapshot(t, snapshot, etcdtest.SnapshotRestore{RevisionBump: 100000, MarkCompacted: true})
	s = warmServer(t, e, dataDir, warmDir)
	if got := warmStarted(t, ctx, s); got["services"] != "0" || got["ipaddresses"] != "0" {
		t.Errorf("a start on a restored etcd took %v objects from warm-start files, want 0", got)
	}
	list, err := s.Client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range list.Items {
		names = append(names, svc.Name)
	}
	if strings.Join(names, ",") != "a,kubernetes" {
		t.Errorf("Services after the restore: %v, want a and kubernetes", names)
	}
}
