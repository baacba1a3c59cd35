package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
)

// What operators live through: etcd restored from a snapshot
// under load.
//
// TestEtcdRestoredUnderLoad runs three replicas of one model on one etcd
// while NodePort Services are created and deleted through all of them. It
// takes a snapshot of etcd mid-load (etcdctl snapshot save), lets the load
// go on, stops etcd and restores it from the snapshot (etcdutl snapshot
// restore) while the load keeps sending. Three ways:
//   - left-running: the replicas are left running on a plain restore (the
//     revision goes back to the snapshot's). Each must stop on its own,
//     exit 1 naming the restore; they are started again as a supervisor
//     would.
//   - left-running-bumped: the same on the restore etcd recommends for a
//     Kubernetes cluster (--bump-revision, --mark-compacted): the revision
//     moves on, so only the replicas' restore markers can tell.
//   - restarted: the operator's procedure of docs/operations.md: the replicas are
//     stopped (SIGTERM) before the restore and started after it.
//
// Each checks that no ClusterIP or node port is acknowledged or stored for
// two Services; that every create acknowledged before the snapshot, or
// sent after etcd was stopped, is stored with what it was acknowledged with
// (what was acknowledged between the two is undone by the restore, as for
// kube-apiserver); and that one `allocator repair` pass leaves nothing to
// fix (in the bitmap model, one pass of each model's repair: a bitmap
// fleet keeps IPAddresses as well). It logs the figures: leaked records before the repair, how long the
// replicas took to stop, and the first good create after etcd was back.

const restoreRange = "10.0.0.0/21"

type restoreScenario struct {
	name string
	// how etcd is rebuilt from the snapshot
	how etcdtest.SnapshotRestore
	// stopFirst: the replicas are stopped before the restore and started
	// after it; otherwise they are left running.
	stopFirst bool
}

func TestEtcdRestoredUnderLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts server processes and restores an etcd under them")
	}
	bin := buildBinary(t)
	scenarios := []restoreScenario{
		{name: "left-running"},
		{name: "left-running-bumped", how: etcdtest.SnapshotRestore{RevisionBump: 1_000_000_000, MarkCompacted: true}},
		{name: "restarted", stopFirst: true},
	}
	for _, model := range []string{"bitmap", "ipaddress"} {
		for _, sc := range scenarios {
			t.Run(model+"/"+sc.name, func(t *testing.T) { testEtcdRestoredUnderLoad(t, bin, model, sc) })
		}
	}
}

func testEtcdRestoredUnderLoad(t *testing.T, bin, model string, sc restoreScenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	f := newFleet(t, bin, etcd, 3, "--service-cluster-ip-range", restoreRange)
	f.startAll(model)

	l := startOpsLoad(t, f, opsLoadConfig{
		workers: 6, interval: 15 * time.Millisecond, maxDuration: 3 * time.Minute,
		prefix: "svc", deleteEvery: 4, seed: loadSeed(t),
	})
	defer l.halt()
	if !waitFor(60*time.Second, func() bool { return l.acked() >= 100 && l.deleted() >= 20 }) {
		t.Fatalf("load too slow before the snapshot: %d creates, %d deletes acknowledged\n%s", l.acked(), l.deleted(), f.logs(20))
	}
	snapshotStart := time.Now()
	snapshot := etcd.Snapshot(t, ctx)
	ackedAtSnapshot := l.acked()
	if !waitFor(60*time.Second, func() bool { return l.acked() >= ackedAtSnapshot+60 && l.deleted() >= 40 }) {
		t.Fatalf("load too slow after the snapshot: %d creates acknowledged", l.acked()-ackedAtSnapshot)
	}
	t.Logf("snapshot at %d acknowledged creates; %d more acknowledged before the restore", ackedAtSnapshot, l.acked()-ackedAtSnapshot)

	if sc.stopFirst {
		for _, r := range f.replicas {
			f.stop(r, syscall.SIGTERM)
		}
	}
	// etcd drains the requests in flight as it stops, so a write sent a
	// moment before Stop returns may still be applied, and then undone by
	// the restore: the load stops trusting acknowledgements only once
	// the old etcd is down.
	etcd.Stop()
	l.forgetAfter(snapshotStart)
	etcd.RestoreSnapshot(t, snapshot, sc.how)
	etcdUp := time.Now()
	t.Logf("etcd restored from the snapshot (%+v) and up", sc.how)

	if sc.stopFirst {
		f.startAll(model)
	} else {
		superviseRestart(t, f, model, etcdUp)
	}
	var first time.Time
	if !waitFor(90*time.Second, func() bool {
		var ok bool
		first, ok = l.firstAckAfter(etcdUp)
		return ok
	}) {
		t.Fatalf("no create acknowledged within 90 s of etcd's restore\n%s", f.logs(30))
	}
	t.Logf("RECOVERY: first good create %s after etcd was back", first.Sub(etcdUp).Round(time.Millisecond))
	ackedAfter := l.acked()
	if !waitFor(60*time.Second, func() bool { return l.acked() >= ackedAfter+100 && f.allServing() }) {
		t.Errorf("after the restore: %d creates acknowledged in 60 s, want 100; every replica serving: %v", l.acked()-ackedAfter, f.allServing())
	}
	l.halt()
	l.summary()

	before := auditClaims(t, ctx, etcd.Client(), model, restoreRange)
	lost, _ := l.verifyAcks(before)
	reportAudit(t, "before repair", before, true)
	t.Logf("FIGURES %s/%s: %d duplicate ClusterIPs, %d duplicate node ports, %d acknowledged creates lost, %d leaked and %d missing records before repair, first good create %s after etcd was back",
		model, sc.name, len(before.dupIPs), len(before.dupPorts), lost, len(before.leaks), len(before.missing), first.Sub(etcdUp).Round(time.Millisecond))
	if len(before.missing) > 0 {
		t.Errorf("before repair: %d stored Services without their record", len(before.missing))
	}
	if model == "bitmap" {
		// A bitmap fleet keeps IPAddresses too (its transition repair
		// does), and a replica stopped by the restore in the middle of
		// that repair's create can leave an IPAddress for a Service the
		// restore undid: a leak the servers' IPAddress repair deletes once
		// its grace has passed, never a duplicate. One pass of it here.
		out, _, code := runCLI(t, f.bin, "repair", "--model", "ipaddress", "--orphan-grace", "1s", "-o", "json", "--kubeconfig", f.mustPick().kubeconfig)
		if code != 0 {
			t.Errorf("repair --model ipaddress of the bitmap fleet's IPAddresses: exit %d\n%s", code, out)
		}
	}
	kept := repairOnce(t, f, model)
	after := auditClaims(t, ctx, etcd.Client(), model, restoreRange)
	reportAudit(t, "after one repair pass", after, kept)
	if t.Failed() {
		t.Logf("replica logs:\n%s", f.logs(40))
	}
}

// superviseRestart waits for every replica, left running on an etcd
// restored under it, to stop on its own (exit 1, its log naming the
// restore) and starts it again, as a supervisor restarting it on failure
// would. It logs how long each took to stop.
func superviseRestart(t *testing.T, f *fleet, model string, etcdUp time.Time) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(f.replicas))
	for i, r := range f.replicas {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		wg.Go(func() {
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				errs[i] = fmt.Errorf("%s (pid %d) still running 30 s after etcd was restored under it", r.name, p.cmd.Process.Pid)
				return
			}
			r.serving.Store(nil)
			stopped := time.Since(etcdUp)
			code := p.cmd.ProcessState.ExitCode()
			if log := p.log(); code != 1 || !strings.Contains(log, "restored from a backup") {
				errs[i] = fmt.Errorf("%s (pid %d) exited %d after etcd's restore, want 1 naming the restore:\n%s", r.name, p.cmd.Process.Pid, code, tail(log, 15))
				return
			}
			t.Logf("%s stopped %s after etcd was back: %s", r.name, stopped.Round(time.Millisecond), lastLine(p.log(), "restored from a backup"))
			np := f.launch(r, model)
			ep, err := f.waitReady(r, np, 90*time.Second)
			if err != nil {
				errs[i] = fmt.Errorf("%s not ready again: %w\n%s", r.name, err, tail(np.log(), 30))
				return
			}
			r.serving.Store(ep)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// allServing reports whether every replica is serving.
func (f *fleet) allServing() bool {
	for _, r := range f.replicas {
		if r.serving.Load() == nil {
			return false
		}
	}
	return true
}

// lastLine returns the last line of log containing s.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}
