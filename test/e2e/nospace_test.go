package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// What operators live through: etcd runs out of space.
//
// An etcd whose database reaches its quota raises the NOSPACE alarm and
// refuses every write that adds data ("mvcc: database space exceeded")
// until an operator compacts, defragments and disarms it; reads and deletes
// keep working. TestEtcdOutOfSpace runs three replicas of one model on an
// etcd with a small quota whose history is nearly full (ballast written and
// deleted, as a cluster whose compaction stopped), creates and deletes
// NodePort Services through all of them until etcd refuses, and checks:
//   - every refused create is a 5xx that names the cause;
//   - /readyz of every replica fails on its etcd-alarms check, and
//     /readyz/etcd-alarms names NOSPACE;
//   - no ClusterIP or node port is stored for two Services, and every
//     acknowledged create is stored with what it was acknowledged with;
//   - after the operator's compact, defragment and disarm (done here with
//     clientv3, as etcdctl does), creates succeed again without a restart
//     (the time from the disarm to the first good create is logged), and
//     /readyz passes;
//   - one `allocator repair` pass leaves nothing to fix.
//
// Leaks are expected and counted, not failed: a delete during the outage
// removes the Service (deletes are allowed) but cannot write the bit or
// node port free (a write), so the record stays until repair frees it.

const (
	nospaceRange = "10.0.0.0/21"
	// nospaceQuota is the etcd's --quota-backend-bytes, and nospaceHeadroom
	// what the ballast leaves of it for the load: some hundred creates.
	nospaceQuota    = 8 << 20
	nospaceHeadroom = 384 << 10
	// spaceExceeded is etcd's text for a write refused for space.
	spaceExceeded = "database space exceeded"
)

// TestEtcdOutOfSpace runs alone, not in parallel with the other e2e tests:
// it must fill etcd's quota within 90 s, a write rate their load would take
// from it.
func TestEtcdOutOfSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes and fills an etcd")
	}
	bin := buildBinary(t)
	for _, model := range []string{"bitmap", "ipaddress"} {
		t.Run(model, func(t *testing.T) { testEtcdOutOfSpace(t, bin, model) })
	}
}

func testEtcdOutOfSpace(t *testing.T, bin, model string) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	etcd := etcdtest.NewWithQuota(t, nospaceQuota)
	f := newFleet(t, bin, etcd, 3, "--service-cluster-ip-range", nospaceRange)
	f.startAll(model)
	fillHistory(t, ctx, etcd, nospaceQuota-nospaceHeadroom)

	l := startOpsLoad(t, f, opsLoadConfig{
		workers: 6, interval: 10 * time.Millisecond, maxDuration: 4 * time.Minute,
		prefix: "svc", deleteEvery: 4, seed: loadSeed(t), giveUpOn5xx: true,
	})
	defer l.halt()

	// Fill until etcd refuses, and keep the load going through the outage.
	if !waitFor(90*time.Second, func() bool { return len(l.refusals()) >= 20 }) {
		t.Fatalf("etcd did not run out of space within 90 s: %d creates acknowledged, %d refused", l.acked(), len(l.refusals()))
	}
	outage := time.Now()
	deletesBefore := l.deleted()
	t.Logf("etcd refuses writes: %d creates acknowledged before, first refusal at %s", l.acked(), l.refusals()[0].at.Format("15:04:05.000"))

	// Every replica's /readyz says why.
	for _, r := range f.replicas {
		ep := r.serving.Load()
		var body, detail string
		ok := waitFor(30*time.Second, func() bool {
			raw, err := ep.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			body = string(raw)
			if err == nil || !strings.Contains(body, "[-]etcd-alarms failed") {
				return false
			}
			raw, _ = ep.client.Discovery().RESTClient().Get().AbsPath("/readyz/etcd-alarms").DoRaw(ctx)
			detail = string(raw)
			return strings.Contains(detail, "NOSPACE") && strings.Contains(detail, spaceExceeded)
		})
		if !ok {
			t.Errorf("%s: /readyz does not say etcd is out of space within 30 s:\n%s\n/readyz/etcd-alarms: %s", ep, body, detail)
			continue
		}
		t.Logf("%s /readyz/etcd-alarms: %s", ep, strings.TrimSpace(detail))
	}

	// The outage lasts a few seconds of creates and deletes (deletes are
	// allowed; their releases are not).
	if !waitFor(30*time.Second, func() bool {
		return time.Since(outage) > 3*time.Second && l.deleted() >= deletesBefore+10
	}) {
		t.Errorf("only %d deletes acknowledged in the outage, want 10", l.deleted()-deletesBefore)
	}
	t.Logf("during the outage: %d refusals, %d deletes acknowledged", len(l.refusals()), l.deleted()-deletesBefore)

	// The operator's recovery: compact the history, defragment, disarm.
	disarmed := recoverSpace(t, ctx, etcd)
	var first time.Time
	if !waitFor(60*time.Second, func() bool {
		var ok bool
		first, ok = l.firstAckStartedAfter(disarmed)
		return ok
	}) {
		t.Fatalf("no create succeeded within 60 s of the disarm\n%s", f.logs(30))
	}
	refusedAfter := 0
	for _, r := range l.refusals() {
		if r.at.After(disarmed) {
			refusedAfter++
		}
	}
	t.Logf("RECOVERY: first good create %s after the disarm (%d refusals after the disarm; the outage lasted %s)",
		first.Sub(disarmed).Round(time.Millisecond), refusedAfter, disarmed.Sub(l.refusals()[0].at).Round(time.Millisecond))
	for _, r := range f.replicas {
		ep := r.serving.Load()
		if !waitFor(30*time.Second, func() bool {
			_, err := ep.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err == nil
		}) {
			t.Errorf("%s: /readyz still failing 30 s after the disarm", ep)
		}
	}
	t.Logf("every replica ready again %s after the disarm", time.Since(disarmed).Round(time.Millisecond))
	ackedAtDisarm := l.acked()
	if !waitFor(60*time.Second, func() bool { return l.acked() >= ackedAtDisarm+60 }) {
		t.Errorf("only %d creates acknowledged within 60 s after the recovery, want 60", l.acked()-ackedAtDisarm)
	}
	l.halt()
	l.summary()

	// The refusals: 5xx naming the cause.
	refusals := l.refusals()
	byOp := map[string]int{}
	for _, r := range refusals {
		byOp[r.op]++
		if r.code < 500 || !strings.Contains(r.message, spaceExceeded) {
			t.Errorf("%s %s via %s at %s: %d %q; want a 5xx naming %q", r.op, r.name, r.via, r.at.Format("15:04:05.000"), r.code, r.message, spaceExceeded)
		}
	}
	if len(refusals) > 0 {
		t.Logf("refused: %v; e.g. %d %q", byOp, refusals[0].code, refusals[0].message)
	}

	// etcd before any repair, then after one repair pass.
	before := auditClaims(t, ctx, etcd.Client(), model, nospaceRange)
	lost, storedAnyway := l.verifyAcks(before)
	reportAudit(t, "before repair", before, true)
	t.Logf("FIGURES %s: %d duplicate ClusterIPs, %d duplicate node ports, %d acknowledged creates lost, %d refused creates stored all the same, %d leaked and %d missing records before repair, first good create %s after the disarm",
		model, len(before.dupIPs), len(before.dupPorts), lost, storedAnyway, len(before.leaks), len(before.missing), first.Sub(disarmed).Round(time.Millisecond))
	kept := repairOnce(t, f, model)
	after := auditClaims(t, ctx, etcd.Client(), model, nospaceRange)
	reportAudit(t, "after one repair pass", after, kept)
	if t.Failed() {
		t.Logf("replica logs:\n%s", f.logs(40))
	}
}

// fillHistory writes and overwrites a ballast key outside the registry
// until etcd's database is about size bytes, then deletes the key: the
// space stays taken by history until a compaction, as in a cluster whose
// compaction stopped.
func fillHistory(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, size int64) {
	t.Helper()
	const key, chunk = "/ballast", 64 << 10
	client := etcd.Client()
	value := strings.Repeat("b", chunk)
	dbSize := func() int64 {
		// The backend size is updated on its commits (every 100 ms).
		var st *clientv3.StatusResponse
		err := waitForErr(2*time.Second, func() error {
			var err error
			st, err = client.Status(ctx, etcd.Endpoints()[0])
			return err
		})
		if err != nil {
			t.Fatalf("etcd status: %v", err)
		}
		return st.DbSize
	}
	start := dbSize()
	puts := 0
	for {
		// Put at most half of what is left before looking again: the size
		// read lags the puts by up to one backend commit.
		time.Sleep(150 * time.Millisecond)
		left := size - dbSize()
		if left < 2*chunk {
			break
		}
		for range max(1, left/(2*chunk+chunk/4)) {
			if _, err := client.Put(ctx, key, value); err != nil {
				t.Fatalf("ballast put %d (db %d bytes): %v", puts, dbSize(), err)
			}
			puts++
		}
		if puts > 4*int(size/chunk) {
			t.Fatalf("etcd grew to only %d bytes with %d puts of %d", dbSize(), puts, chunk)
		}
	}
	if _, err := client.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	t.Logf("ballast: etcd's database %d → %d bytes of its %d quota", start, dbSize(), int64(nospaceQuota))
}

// waitForErr retries fn every 100 ms until it succeeds or timeout passes.
func waitForErr(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recoverSpace is the operator's procedure (etcd's "space quota" runbook):
// compact at the current revision, defragment, disarm every NOSPACE alarm.
// It returns when the disarm was acknowledged.
func recoverSpace(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd) time.Time {
	t.Helper()
	client := etcd.Client()
	endpoint := etcd.Endpoints()[0]
	st, err := client.Status(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := client.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact at %d: %v", st.Header.Revision, err)
	}
	if _, err := client.Defragment(ctx, endpoint); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	alarms, err := client.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alarms.Alarms {
		if _, err := client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			t.Fatalf("disarm %v: %v", a, err)
		}
	}
	disarmed := time.Now()
	after, err := client.Status(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recovery: compacted at revision %d, defragmented (%d → %d bytes), disarmed %d alarm(s), in %s",
		st.Header.Revision, st.DbSize, after.DbSize, len(alarms.Alarms), disarmed.Sub(start).Round(time.Millisecond))
	return disarmed
}

// reportAudit logs an audit and fails on duplicates, and — when leaksAllowed
// is false — on any leak or missing record.
func reportAudit(t *testing.T, when string, a claimAudit, leaksAllowed bool) {
	t.Helper()
	t.Logf("%s: %s", when, a)
	for _, d := range a.dupIPs {
		t.Errorf("%s: DUPLICATE ClusterIP %s", when, d)
	}
	for _, d := range a.dupPorts {
		t.Errorf("%s: DUPLICATE node port %s", when, d)
	}
	show := func(kind string, items []string) {
		if len(items) == 0 {
			return
		}
		msg := fmt.Sprintf("%s: %d %s: %s", when, len(items), kind, strings.Join(items[:min(len(items), 20)], ", "))
		if leaksAllowed {
			t.Log(msg)
		} else {
			t.Error(msg)
		}
	}
	show("leaked", a.leaks)
	show("missing", a.missing)
}

// repairOnce runs one `allocator repair` of model (which repairs the node
// ports too) with short grace periods — the load has stopped, no create is
// in flight — and then a dry run, which must find nothing left.
func repairOnce(t *testing.T, f *fleet, model string) (keptInFlight bool) {
	t.Helper()
	common := []string{"-o", "json", "--model", model, "--etcd-servers", f.endpoints(), "--kubeconfig", f.mustPick().kubeconfig}
	// A bitmap bit without its IPAddress (a "disagreement") is the
	// servers' own IPAddress repair's to mend, not the job's: a create of
	// it that failed while etcd refused writes is retried with its key's
	// backoff (at most 10 s). Wait for that first, bounded.
	start := time.Now()
	var left []report.Problem
	if !waitFor(30*time.Second, func() bool {
		out, _, _ := runCLIQuiet(t, f.bin, append([]string{"repair", "--dry-run"}, common...)...)
		var rep report.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			return false
		}
		left = slices.DeleteFunc(rep.Problems, func(p report.Problem) bool { return p.Type != iprepair.TypeDisagreement })
		return len(left) == 0
	}) {
		t.Errorf("the servers' IPAddress repair left %d disagreements 30 s on: %+v", len(left), left)
	} else {
		t.Logf("the servers' own repair had no disagreement left %s after the load stopped", time.Since(start).Round(time.Millisecond))
	}
	// A leak kept for the Service writes in flight (InFlight) is right
	// here: etcd restored from a snapshot brings back the write leases
	// registered before it, and they live their TTL again; the leak is
	// freed once they have ended.
	inFlightOnly := func(rep report.Report) bool {
		return !slices.ContainsFunc(rep.Problems, func(p report.Problem) bool { return !p.Fixed && !p.InFlight })
	}
	out, _, code := runCLI(t, f.bin, append([]string{"repair", "--leak-grace", "2s", "--orphan-grace", "1s"}, common...)...)
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || (code != 0 && !inFlightOnly(rep)) {
		t.Errorf("repair --model %s: exit %d, %v", model, code, err)
	}
	fixed := map[string]int{}
	for _, p := range rep.Problems {
		if p.Fixed {
			fixed[p.Resource+" "+p.Type]++
		}
	}
	t.Logf("repair --model %s: exit %d, %d problems, fixed %v", model, code, len(rep.Problems), fixed)
	kept := 0
	for _, p := range rep.Problems {
		if p.InFlight && !p.Fixed {
			kept++
		}
	}
	if kept > 0 {
		t.Logf("repair --model %s keeps %d leaks for the Service writes in flight (write leases still alive, such as those a restore brings back)", model, kept)
	}
	// A dry run's single pass cannot tell a leak kept for the writes in
	// flight from any other: those the repair kept are leaks still.
	out, _, code = runCLI(t, f.bin, append([]string{"repair", "--dry-run"}, common...)...)
	rep = report.Report{}
	err := json.Unmarshal([]byte(out), &rep)
	remaining := slices.DeleteFunc(slices.Clone(rep.Problems), func(p report.Problem) bool { return kept > 0 && p.Type == report.TypeLeak })
	if err != nil || len(remaining) != 0 || (code != 0 && kept == 0) {
		t.Errorf("repair --dry-run --model %s after one pass: exit %d, %v, problems %+v", model, code, err, rep.Problems)
	}
	return kept > 0
}
