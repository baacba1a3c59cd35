package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// The model-transition scenarios (design.md §8), with real `allocator serve`
// processes on one real etcd, driven through client-go. Every scenario
// asserts: no two Services ever share a ClusterIP, every acknowledged create
// is stored (and every acknowledged delete gone), and — once the repair
// controllers have had time — every Service address is held by exactly its
// own IPAddress and, while dual write is on, by its bit in the
// RangeAllocation; no repair event says an address was not allocated or is
// shared; the standalone repair job of either model finds nothing but leaks.
//
// Leaks (an address claimed with no Service) are logged with the history of
// the Services that held the address, not failed: both models free them by
// their leak rules, and a SIGKILL legitimately leaves some.
//
// The load is paced at about 30 operations a second: at 10 a second the
// build before dual write (1beb62d) showed no duplicate in a rolling
// switch; at 30 it shows several per run, which is what these tests must
// be able to see.
//
// ALLOCATOR_E2E_BIN runs a prebuilt allocator binary instead of building
// this tree's (to run the scenarios against another version).
// ALLOCATOR_E2E_SEED fixes the load's seed (which creates are static, which
// Services are deleted); every run logs the seed it used.

const transitionRange = "10.0.0.0/21"

// transitionServeArgs are the serve flags of every replica. The repair
// period is the default (3 minutes): a short one would heal a model that
// does not see the other's allocations before a duplicate is handed out,
// and hide exactly the failure these tests are about.
var transitionServeArgs = []string{"--service-cluster-ip-range", transitionRange}

func TestTransition(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts many server processes")
	}
	bin := os.Getenv("ALLOCATOR_E2E_BIN")
	if bin == "" {
		bin = buildBinary(t)
	}
	t.Run("RollingSwitch", func(t *testing.T) { testRollingSwitch(t, bin, false) })
	t.Run("RollingSwitchKilled", func(t *testing.T) { testRollingSwitch(t, bin, true) })
	t.Run("Finish", func(t *testing.T) { testFinish(t, bin) })
}

func loadSeed(t *testing.T) uint64 {
	if s := os.Getenv("ALLOCATOR_E2E_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ALLOCATOR_E2E_SEED: %v", err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// lowerBand returns the static band of the range without its first address
// (the default/kubernetes Service's).
func lowerBand(cidr netip.Prefix) []netip.Addr {
	rng := subrange.MustNew(cidr, model.Bitmap)
	var out []netip.Addr
	ip := rng.First().Next()
	for range rng.StaticSize() - 1 {
		out = append(out, ip)
		ip = ip.Next()
	}
	return out
}

// testRollingSwitch switches three replicas from the bitmap model to the
// IPAddress model one at a time while Services are created and deleted
// through every serving replica, then back to the bitmap model one at a time
// (each bitmap replica starts while IPAddress-model replicas are live). With
// kill, replica 2 is killed (SIGKILL) instead of stopped in both directions
// and started again with the new model at once; its record lingers until
// its lease expires.
func testRollingSwitch(t *testing.T, bin string, kill bool) {
	cidr := netip.MustParsePrefix(transitionRange)
	etcd := etcdtest.New(t)
	f := newFleet(t, bin, etcd, 3, transitionServeArgs...)
	f.startAll("bitmap")

	// The load runs until the six switches are done (halt below). Its
	// budget only keeps the range from filling: one operation in three
	// deletes, so 3,000 creates store about 1,500 Services of the /21's
	// 2,046 addresses; at the load's pace that is more than two minutes,
	// longer than the switches take on a loaded 2-core machine.
	seed := loadSeed(t)
	l := startLoad(t, f, loadConfig{
		workers: 12, maxCreates: 3000, maxDuration: 4 * time.Minute, interval: 30 * time.Millisecond,
		prefix: "svc", statics: lowerBand(cidr), staticEvery: 10, deleteEvery: 3, seed: seed,
	})
	defer l.halt()
	for _, r := range f.replicas {
		l.waitAcksVia(r.serving.Load(), 5, 30*time.Second)
	}
	switchStart := time.Now()
	for _, model := range []string{"ipaddress", "bitmap"} {
		for i, r := range f.replicas {
			sig := syscall.SIGTERM
			if kill && i == 1 {
				sig = syscall.SIGKILL
			}
			old := r.serving.Load()
			t0 := time.Now()
			f.stop(r, sig)
			ep := f.start(r, model)
			t.Logf("%s: %s → %s by %s in %s (stopped at %s, ready at %s)", r.name, old, ep, sig, time.Since(t0).Round(100*time.Millisecond),
				t0.Format("15:04:05.000"), time.Now().Format("15:04:05.000"))
			l.waitAcksVia(ep, 25, 45*time.Second)
		}
	}
	l.halt()
	t.Logf("the six switches took %s", time.Since(switchStart).Round(time.Second))
	l.summary()
	l.mu.Lock()
	for _, model := range []string{"bitmap", "ipaddress"} {
		if l.byModel[model] < 30 {
			t.Errorf("only %d creates were acknowledged by %s-model replicas: the load did not overlap the transition", l.byModel[model], model)
		}
	}
	l.mu.Unlock()

	verifyStored(t, f, l)
	state, ok, err := transition.ReadState(context.Background(), etcd.Client(), "/registry")
	if err != nil || !ok || !state.DualWrite {
		t.Fatalf("transition state after a rolling switch: %+v stored=%v err=%v; want dual write on", state, ok, err)
	}
	verifyClaims(t, f, cidr, true, 60*time.Second)
	verifyNoRepairEvents(t, f, l)
	verifyRecords(t, f, 30*time.Second)
	verifyRepairJob(t, f, l)
	if t.Failed() {
		t.Logf("replica logs:\n%s", f.logs(60))
	}
}

// verifyRepairJob runs the standalone `allocator repair --dry-run` of both
// models: neither may find a Service address that is not allocated, shared,
// out of range or invalid. Leaks (an address claimed by a create that a
// SIGKILL cut short) are allowed; the controllers free them after their
// grace periods.
func verifyRepairJob(t *testing.T, f *fleet, loads ...*load) {
	t.Helper()
	for _, model := range []string{"bitmap", "ipaddress"} {
		out, _, code := runCLI(t, f.bin, "repair", "--dry-run", "-o", "json", "--model", model,
			"--etcd-servers", f.endpoints(), "--kubeconfig", f.mustPick().kubeconfig)
		var rep report.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Errorf("repair --model %s: exit %d, output is not a JSON report: %v", model, code, err)
			continue
		}
		leaks := 0
		for _, p := range rep.Problems {
			if p.Type == report.TypeLeak {
				leaks++
				var history []string
				if ip, err := netip.ParseAddr(p.IP); err == nil {
					for _, l := range loads {
						history = append(history, l.history(ip)...)
					}
				}
				t.Logf("repair --model %s: leak %s (%s); the load's Services with that address: %v", model, p.IP, p.Message, history)
				continue
			}
			t.Errorf("repair --model %s found %s %s (%s): %s", model, p.Type, p.IP, p.Service, p.Message)
		}
		t.Logf("repair --model %s: exit %d, %d Services, %d addresses allocated, %d leaks", model, code, rep.Services, rep.Allocated, leaks)
	}
}

// verifyRecords polls until the transition's replica records are exactly
// the running processes, each under its model: a stopped replica's record
// is gone at once, a killed one's when its lease expires.
func verifyRecords(t *testing.T, f *fleet, timeout time.Duration) {
	t.Helper()
	var got map[int]string
	want := f.livePIDs()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		records, err := transition.ListRecords(ctx, f.etcd.Client(), "/registry", "")
		if err != nil {
			return false, nil
		}
		got = map[int]string{}
		for _, r := range records {
			got[r.PID] = string(r.Model)
		}
		return maps.Equal(got, want), nil
	})
	if err != nil {
		t.Errorf("replica records (pid: model) %v, want the running processes %v within %s", got, want, timeout)
		return
	}
	t.Logf("replica records are the running processes %v after %s", want, time.Since(start).Round(100*time.Millisecond))
}

// transitionStatus runs `allocator transition status -o json`.
// waitFinishAcknowledged waits until the n replicas run the IPAddress model
// with dual write off at the stored state's revision: until then a replica
// may still release a deleted Service's bit from the bitmap.
func waitFinishAcknowledged(t *testing.T, bin string, common []string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := transitionStatus(t, bin, common)
		acked := 0
		for _, r := range st.Replicas {
			if r.Model == model.IPAddress && !r.DualWrite && r.StateRevision >= st.State.Revision {
				acked++
			}
		}
		if acked == n && len(st.Replicas) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not acknowledge the finished transition within 30s: %+v", st.Replicas)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func transitionStatus(t *testing.T, bin string, common []string) transition.Status {
	t.Helper()
	out, _, code := runCLI(t, bin, append([]string{"transition", "status", "-o", "json"}, common...)...)
	var st transition.Status
	if code != 0 {
		t.Fatalf("transition status: exit %d", code)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("transition status output is not JSON: %v\n%s", err, out)
	}
	return st
}

// testFinish ends the transition on a fleet that switched to the IPAddress
// model, checks that the bitmap is no longer written and that a bitmap
// replica then refuses to start, resumes, and runs a bitmap replica beside
// the IPAddress-model ones again.
func testFinish(t *testing.T, bin string) {
	ctx := context.Background()
	cidr := netip.MustParsePrefix(transitionRange)
	etcd := etcdtest.New(t)
	f := newFleet(t, bin, etcd, 2, transitionServeArgs...)
	r1, r2 := f.replicas[0], f.replicas[1]
	bitmapEP := f.start(r1, "bitmap")
	f.start(r2, "ipaddress")
	seed := loadSeed(t)
	statics := lowerBand(cidr)
	burst := func(prefix string, creates int, statics []netip.Addr) *load {
		l := startLoad(t, f, loadConfig{
			workers: 8, maxCreates: creates, maxDuration: 60 * time.Second, interval: 10 * time.Millisecond,
			prefix: prefix, statics: statics, staticEvery: 8, deleteEvery: 8, seed: seed,
		})
		l.wait()
		l.summary()
		return l
	}
	first := burst("mixed", 60, statics[:10])
	verifyStored(t, f, first)
	common := []string{"--etcd-servers", f.endpoints(), "--kubeconfig", f.mustPick().kubeconfig}

	// Refused while the bitmap replica is live; the message names it.
	records, err := transition.ListRecords(ctx, etcd.Client(), "/registry", model.Bitmap)
	if err != nil || len(records) != 1 || records[0].PID != bitmapEP.pid {
		t.Fatalf("bitmap replica records: %+v, %v; want one of pid %d", records, err, bitmapEP.pid)
	}
	_, out, code := runCLI(t, bin, append([]string{"transition", "finish"}, common...)...)
	if code == 0 || !strings.Contains(out, records[0].ID) {
		t.Fatalf("finish with bitmap replica %s live: exit %d, want non-zero naming it", records[0].ID, code)
	}
	if st := transitionStatus(t, bin, common); !st.State.DualWrite {
		t.Fatalf("a refused finish turned dual write off: %+v", st.State)
	}

	// Switch r1 too, let the repair give every address its IPAddress, finish.
	f.stop(r1, syscall.SIGTERM)
	f.start(r1, "ipaddress")
	verifyClaims(t, f, cidr, true, 60*time.Second)
	_, _, code = runCLI(t, bin, append([]string{"transition", "finish"}, common...)...)
	if code != 0 {
		t.Fatalf("finish with every replica on the IPAddress model: exit %d\n%s", code, f.logs(30))
	}
	st := transitionStatus(t, bin, common)
	if st.State.DualWrite {
		t.Fatalf("dual write still on after finish: %+v", st.State)
	}
	// Wait for both replicas to act on the new state before measuring.
	waitFinishAcknowledged(t, bin, common, 2)
	bitmapKey := etcdlayout.Layout{}.PrimaryServiceIPRange()
	modRevision := func() int64 {
		resp, err := etcd.Client().Get(ctx, bitmapKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read %s: %v (%d keys)", bitmapKey, err, len(resp.Kvs))
		}
		return resp.Kvs[0].ModRevision
	}
	before := modRevision()
	l := burst("off", 60, statics[10:20])
	verifyStored(t, f, l)
	if after := modRevision(); after != before {
		t.Errorf("the retired bitmap was written after finish: ModRevision %d → %d", before, after)
	}
	verifyClaims(t, f, cidr, false, 60*time.Second)

	// A bitmap replica started now refuses, with the reason.
	r3 := f.newReplica("r3")
	f.replicas = append(f.replicas, r3)
	p := f.launch(r3, "bitmap")
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("a bitmap replica on a finished transition still runs after 30s:\n%s", tail(p.log(), 30))
	}
	if p.err == nil || !strings.Contains(p.log(), transition.ErrRetired.Error()) {
		t.Fatalf("a bitmap replica on a finished transition: exit %v, want non-zero with %q in its output:\n%s",
			p.err, transition.ErrRetired, tail(p.log(), 30))
	}
	t.Logf("the stale bitmap replica refused to start: %v", p.err)
	if after := modRevision(); after != before {
		t.Errorf("the refused bitmap replica wrote the bitmap: ModRevision %d → %d", before, after)
	}

	// Resume: the bitmap replica starts, sees every address, allocates.
	out, _, code = runCLI(t, bin, append([]string{"transition", "resume"}, common...)...)
	if code != 0 {
		t.Fatalf("resume: exit %d", code)
	}
	if st := transitionStatus(t, bin, common); !st.State.DualWrite {
		t.Fatalf("dual write off after resume: %+v\n%s", st.State, out)
	}
	f.start(r3, "bitmap")
	l2 := burst("resumed", 90, statics[20:30])
	l2.mu.Lock()
	viaBitmap := l2.byModel["bitmap"]
	l2.mu.Unlock()
	if viaBitmap == 0 {
		t.Errorf("no create was acknowledged by the resumed bitmap replica")
	}
	for _, l := range []*load{first, l, l2} {
		verifyStored(t, f, l)
	}
	verifyClaims(t, f, cidr, true, 60*time.Second)
	verifyNoRepairEvents(t, f, first, l, l2)
	verifyRecords(t, f, 30*time.Second)
	verifyRepairJob(t, f, first, l, l2)
	if t.Failed() {
		t.Logf("replica logs:\n%s", f.logs(60))
	}
}
