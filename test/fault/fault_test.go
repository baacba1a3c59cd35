package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// clientTimeout is the clients' timeout in phase 1, kubectl's
// --request-timeout=1s; half the slow member's delay, so a write sent there
// outlives its request.
const clientTimeout = time.Second

// fillTimeout is the clients' timeout in phase 2, without faults: long
// enough that no fill create ends with its outcome unknown.
const fillTimeout = 20 * time.Second

// slowDelay is the slow member's delay.
const slowDelay = 2 * time.Second

// quiet is how long etcd's Service and allocation keys must go unchanged
// before the writes of a phase count as settled; it outlasts slowDelay, the
// longest a delayed write can land after the faults stop.
const quiet = 3 * time.Second

type workload string

const (
	clusterIPs workload = "clusterip" // creates, deletes; SingleStack→PreferDualStack when dual-stack
	nodePorts  workload = "nodeport"  // also NodePort and LoadBalancer creates, ClusterIP→NodePort updates
)

// config is one configuration of the matrix.
type config struct {
	model     model.Name
	workload  workload
	dualStack bool
	// endpoints is 3 (--etcd-servers names every member, member 0 through
	// the proxy) or 1 (member 1 only: the control).
	endpoints int
	// repair runs the servers' repair every repairInterval.
	repair bool
}

// repairInterval is the repair period of the configurations with repair.
const repairInterval = 3 * time.Second

func (c config) String() string {
	family := "ipv4"
	if c.dualStack {
		family = "dual"
	}
	s := fmt.Sprintf("%s/%s/%s/%dep", c.model, c.workload, family, c.endpoints)
	if c.repair {
		s += "+repair"
	}
	return s
}

// serviceRange is small where the workload fills it: a released address
// still held by a stored Service is then handed out again.
func (c config) serviceRange() string {
	v4, v6 := "10.96.0.0/25", "fd00:96::/121"
	if c.workload == nodePorts {
		v4, v6 = "10.96.0.0/24", "fd00:96::/120" // the node ports fill first
	}
	if c.dualStack {
		return v4 + "," + v6
	}
	return v4
}

// nodePortRange has 150 ports.
const nodePortRange = "30000-30149"

// scale is how much load a run puts on a configuration.
type scale struct {
	replicas int
	workers  int // spread over the replicas
	ops      int // per worker in phase 1
	cycles   int // of the fault schedule
}

var (
	boundedScale = scale{replicas: 2, workers: 8, ops: 40, cycles: 1}
	fullScale    = scale{replicas: 3, workers: 12, ops: 400, cycles: 3}
)

// matrix returns the configurations to run: all of them with FAULT_FULL,
// else the bounded subset CI runs.
func matrix(full bool) []config {
	if !full {
		return []config{
			{model: model.IPAddress, workload: nodePorts, endpoints: 3},
			{model: model.Bitmap, workload: clusterIPs, dualStack: true, endpoints: 3},
			// The control: the same load without a slow member.
			{model: model.IPAddress, workload: nodePorts, endpoints: 1},
		}
	}
	var out []config
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		for _, w := range []workload{clusterIPs, nodePorts} {
			for _, dual := range []bool{false, true} {
				out = append(out,
					config{model: m, workload: w, dualStack: dual, endpoints: 3},
					config{model: m, workload: w, dualStack: dual, endpoints: 3, repair: true},
					config{model: m, workload: w, dualStack: dual, endpoints: 1})
			}
		}
	}
	return out
}

// TestFault runs the matrix (doc.go) and logs a table of its figures.
func TestFault(t *testing.T) {
	full := os.Getenv("FAULT_FULL") != ""
	if testing.Short() && !full {
		t.Skip("the fault matrix takes minutes; not in -short")
	}
	sc := boundedScale
	if full {
		sc = fullScale
	}
	var rows []row
	for _, c := range matrix(full) {
		t.Run(strings.ReplaceAll(c.String(), "/", "-"), func(t *testing.T) {
			r := run(t, c, sc)
			t.Log(r.line())
			rows = append(rows, r)
		})
	}
	t.Logf("scale %+v\n%s", sc, table(rows))
}

// row is the figures of one configuration.
type row struct {
	config                string
	outcome               outcome
	services              int
	unreserved            int
	dupIPs, dupPorts      int
	leaks                 int
	fills                 []string
	elapsed               time.Duration
	faultPhase, fillPhase time.Duration
}

func (r row) line() string {
	return fmt.Sprintf("%s: sent %v failed %v (refused %v) failed-but-landed %v (create/update/delete), %d stored, %d unreserved, %d duplicate ClusterIPs, %d duplicate node ports, %d leaks, %d acknowledged writes lost; fill %s; phase 1 %s, fill %s, in all %s",
		r.config, r.outcome.sent, r.outcome.failed, r.outcome.refused, r.outcome.landed, r.services, r.unreserved, r.dupIPs, r.dupPorts, r.leaks,
		len(r.outcome.lost), strings.Join(r.fills, ", "), r.faultPhase.Round(time.Second), r.fillPhase.Round(time.Second), r.elapsed.Round(time.Second))
}

func table(rows []row) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONFIGURATION\tSENT C/U/D\tFAILED C/U/D\tREFUSED C/U/D\tFAILED-BUT-LANDED C/U/D\tSTORED\tUNRESERVED\tDUP IPS\tDUP PORTS\tLEAKS\tLOST\tTIME")
	for _, r := range rows {
		o := r.outcome
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.config, triple(o.sent), triple(o.failed), triple(o.refused), triple(o.landed),
			r.services, r.unreserved, r.dupIPs, r.dupPorts, r.leaks, len(o.lost), r.elapsed.Round(time.Second))
	}
	_ = w.Flush()
	return b.String()
}

func triple(n [nOps]int) string { return fmt.Sprintf("%d/%d/%d", n[0], n[1], n[2]) }

// run runs one configuration and asserts its invariants.
func run(t *testing.T, c config, sc scale) row {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	cluster := etcdtest.NewCluster(t, 3)
	member := func(i int) string { return cluster.Member(i).Endpoints()[0] }
	servers := []string{member(1)}
	var proxy *faultproxy.Proxy
	if c.endpoints == 3 {
		var err error
		proxy, err = faultproxy.Start(strings.TrimPrefix(member(0), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		servers = []string{proxy.URL(), member(1), member(2)}
	}
	// The check reads through members 1 and 2, never the proxy.
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{member(1), member(2)}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })

	var fast, slow []kubernetes.Interface // per replica: fill clients, phase-1 clients
	for range sc.replicas {
		s := testserver.Start(t, testserver.Options{
			Etcd:         cluster.Member(1),
			Model:        string(c.model),
			ServiceRange: c.serviceRange(),
			WithRepair:   c.repair,
			Flags: func(o *apiserver.Options) {
				o.EtcdServers = servers
				o.ServiceNodePortRange = nodePortRange
				if c.repair {
					o.RepairInterval = repairInterval
				}
			},
		})
		slow = append(slow, clientWithTimeout(t, s.RESTConfig, clientTimeout))
		fast = append(fast, clientWithTimeout(t, s.RESTConfig, fillTimeout))
	}

	// Phase 1: faults and writes.
	l := newLedger()
	seed := time.Now().UnixNano()
	t.Logf("%s: seed %d, etcd servers %v", c, seed, servers)
	phaseStart := time.Now()
	stop, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if proxy != nil {
		wg.Go(func() {
			runSchedule(stop, proxy, sc.cycles)
			stopWriting()
		})
	} else {
		wg.Go(func() {
			sleep(stop, scheduleLength()*time.Duration(sc.cycles))
			stopWriting()
		})
	}
	var workers sync.WaitGroup
	for i := range sc.workers {
		w := &worker{id: i, cfg: c, client: slow[i%len(slow)], ledger: l, rnd: rand.New(rand.NewPCG(uint64(seed), uint64(i)))}
		workers.Go(func() { w.run(ctx, stop, sc.ops) })
	}
	workers.Wait()
	stopWriting()
	wg.Wait()
	if proxy != nil {
		proxy.Set(faultproxy.Fault{})
	}
	faultPhase := time.Since(phaseStart)
	if !waitQuiet(ctx, etcd, etcdlayout.Layout{}, quiet, time.Minute) {
		t.Logf("%s: etcd's Service and allocation keys still changed a minute after the faults stopped", c)
	}

	// Phase 2: fill the ranges.
	fillStart := time.Now()
	r := row{config: c.String()}
	for _, f := range fills(c) {
		res := fill(ctx, fast, l, f.prefix, f.shape, f.limit)
		desc := fmt.Sprintf("%s %d created", f.prefix, res.created)
		if res.full {
			desc += " until full"
		} else {
			desc += fmt.Sprintf(", not full (last error: %v)", res.lastErr)
			t.Errorf("%s: the %s fill did not fill its range: %d created, last error: %v", c, f.prefix, res.created, res.lastErr)
		}
		r.fills = append(r.fills, desc)
	}
	waitQuiet(ctx, etcd, etcdlayout.Layout{}, time.Second, 30*time.Second)
	r.fillPhase = time.Since(fillStart)
	r.faultPhase = faultPhase

	// Check etcd.
	report, err := invariants.Check(ctx, etcd, etcdlayout.Layout{}, c.model)
	if err != nil {
		t.Fatal(err)
	}
	r.outcome = l.check(report.Services)
	r.services = len(report.Services)
	r.unreserved = len(report.Unreserved)
	r.dupIPs, r.dupPorts = len(report.DuplicateIPs), len(report.DuplicateNodePorts)
	r.leaks = len(report.Leaked)
	r.elapsed = time.Since(start)
	if !report.OK() {
		t.Errorf("%s: the stored state breaks the invariants:\n%s\nthe last writes of the first duplicates' holders:\n%s",
			c, report, holdersHistory(l, slices.Concat(report.DuplicateIPs, report.DuplicateNodePorts), 10))
	} else {
		t.Logf("%s", report)
	}
	if lost := r.outcome.lost; len(lost) > 0 {
		t.Errorf("%s: %d acknowledged writes lost:\n%s", c, len(lost), strings.Join(lost[:min(len(lost), 20)], "\n"))
	}
	return r
}

// holdersHistory is, for the holders of the first n duplicates, what the
// ledger knows of their last write.
func holdersHistory(l *ledger, dups []invariants.Shared, n int) string {
	var b strings.Builder
	for _, d := range dups[:min(n, len(dups))] {
		fmt.Fprintf(&b, "%s %s:", d.Kind, d.Value)
		for _, name := range d.Services {
			fmt.Fprintf(&b, " %s (%s)", name, l.describe(name))
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// fillStep is one range phase 2 fills.
type fillStep struct {
	prefix string
	shape  shape
	limit  int // creates at most: more than the range holds
}

// fills are the ranges phase 2 fills: the node ports (NodePort workload) or
// the ClusterIPs of each family.
func fills(c config) []fillStep {
	if c.workload == nodePorts {
		return []fillStep{{prefix: "fill-ports", shape: shape{typ: corev1.ServiceTypeNodePort}, limit: 200}}
	}
	single := corev1.IPFamilyPolicySingleStack
	out := []fillStep{{prefix: "fill-v4", limit: 200, shape: shape{
		typ: corev1.ServiceTypeClusterIP, policy: single, families: []corev1.IPFamily{corev1.IPv4Protocol}}}}
	if c.dualStack {
		out = append(out, fillStep{prefix: "fill-v6", limit: 200, shape: shape{
			typ: corev1.ServiceTypeClusterIP, policy: single, families: []corev1.IPFamily{corev1.IPv6Protocol}}})
	}
	return out
}

// clientWithTimeout is a clientset whose every request ends after timeout,
// as kubectl's --request-timeout: client-go sends it to the server as
// ?timeout=, so the server's request context ends then too.
func clientWithTimeout(t *testing.T, cfg *rest.Config, timeout time.Duration) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = 1000, 1000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// step is one fault of the schedule, in force for d; cut cuts the
// connections at its end.
type step struct {
	fault faultproxy.Fault
	d     time.Duration
	cut   bool
}

// schedule is one cycle of faults on member 0.
func schedule() []step {
	services := [][]byte{[]byte(etcdlayout.Layout{}.ServicesPrefix())}
	return []step{
		// A slow member: every request and answer through it late by 2 s.
		{fault: faultproxy.Fault{Delay: slowDelay}, d: 4 * time.Second},
		// Only the writes and reads of Services late: their allocations
		// went through at once.
		{fault: faultproxy.Fault{Delay: slowDelay, Direction: faultproxy.ToTarget, Match: services}, d: 3 * time.Second},
		// A stalled member whose requests arrive when it recovers (the
		// next step's Set releases them).
		{fault: faultproxy.Fault{Hold: true}, d: 2500 * time.Millisecond},
		{fault: faultproxy.Fault{Delay: slowDelay}, d: 1500 * time.Millisecond},
		// A black hole, then the connections reset: those requests never
		// arrive.
		{fault: faultproxy.Fault{Drop: true}, d: 2 * time.Second, cut: true},
	}
}

func scheduleLength() time.Duration {
	var d time.Duration
	for _, s := range schedule() {
		d += s.d
	}
	return d
}

// runSchedule runs the schedule cycles times, or until ctx ends; the
// proxy's fault is left as the last step set it.
func runSchedule(ctx context.Context, p *faultproxy.Proxy, cycles int) {
	for range cycles {
		for _, s := range schedule() {
			p.Set(s.fault)
			if !sleep(ctx, s.d) {
				return
			}
			if s.cut {
				p.Cut()
			}
		}
	}
}

// sleep waits d, or until ctx ends (then false).
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// waitQuiet waits until no Service, IPAddress or allocation map under layout
// has changed for quiet, at most limit, and reports whether it was quiet.
// Other keys (the servers' restore markers, events, leases) change on their
// own schedule and do not count.
func waitQuiet(ctx context.Context, etcd *clientv3.Client, layout etcdlayout.Layout, quiet, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	watched := []string{layout.ServicesPrefix(), layout.IPAddressesPrefix(), layout.RangesPrefix()}
	events := etcd.Watch(ctx, layout.Root(), clientv3.WithPrefix())
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case resp, ok := <-events:
			if !ok {
				return false
			}
			for _, ev := range resp.Events {
				if hasAnyPrefix(string(ev.Kv.Key), watched) {
					timer.Reset(quiet)
					break
				}
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
