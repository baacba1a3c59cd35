package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/progress"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"

	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/repair/report"
)

type repairOptions struct {
	cluster     clusterFlags
	model       string
	dryRun      bool
	output      string
	interval    time.Duration
	leakGrace   time.Duration
	orphanGrace time.Duration
	progress    bool
	rerun       string    // the command line that resumes an interrupted run
	stderr      io.Writer // where progress goes

	// etcd is the job's etcd client (opened by runner when it reads the
	// bitmap, or for the node-port map); stores are the bitmap model's maps.
	etcd   etcdConn
	stores []iprepair.BitmapStore
	// ipAddresses: the repair judges IPAddress objects (explainByDesign).
	ipAddresses bool
	// handoff carries the Services the node-port pass read from etcd to
	// the IPAddress pass after it (repair.ServicesHandoff).
	handoff *repair.ServicesHandoff
}

// compareModels reports where the bitmap and the IPAddress objects disagree,
// for disagreementSettle at least, while both are kept: dual write on
// (internal/transition). Without a stored
// state (a kube-apiserver cluster) or after `allocator transition finish`
// one of the two is not kept, and drift is expected.
func (o *repairOptions) compareModels(ctx context.Context, client kubernetes.Interface) ([]report.Problem, error) {
	if o.etcd.client == nil || len(o.stores) == 0 {
		return nil, nil
	}
	state, stored, err := transition.ReadState(ctx, o.etcd.client, o.cluster.etcdPrefix)
	if err != nil {
		return nil, err
	}
	if !stored || !state.DualWrite {
		return nil, nil
	}
	return iprepair.CompareModelsSettled(ctx, client, o.stores, disagreementSettle)
}

// disagreementSettle is how long a disagreement between the two models must
// last for the job to report it: the servers' own repair creates the
// IPAddress of a new bitmap allocation within moments, so one seen only
// once is an allocation or release in flight.
const disagreementSettle = 3 * time.Second

func newRepairCommand(streams Streams, plugin bool) *cobra.Command {
	o := &repairOptions{cluster: clusterFlags{plugin: plugin}}
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Find and fix ClusterIP allocations that disagree with the Services",
		Long: `Repair compares the Services with the allocations of the cluster's ClusterIP
allocator model and fixes what it safely can: addresses allocated with no
Service are freed, addresses Services hold that are not allocated are marked.
Duplicates, out-of-range and invalid addresses are reported (as events on the
Service, too) and never changed. When it repairs the bitmap while dual write
is on (a model transition, or any bitmap-model cluster of ours), it also
compares the bitmap with the IPAddresses and reports an address on which
they disagree for 3 s (the servers' repairs resolve those; one seen only
once is an allocation in flight).

--model auto (the default) repairs the model the cluster's writers allocate
from, and prints to stderr, in one line, which one and why. The first that
holds decides:
  no etcd given (--etcd-servers, --data-dir)                    as the API shows it: the model
    allocator serve names on the ServiceCIDR "kubernetes", else
    ipaddress where ServiceCIDRs are served, bitmap where not
  no ClusterIP RangeAllocation in etcd                          ipaddress
  the transition state says dual write is off (the bitmap was
    retired by "allocator transition finish")                    ipaddress
  a bitmap-model replica of ours is live                         bitmap
  an IPAddress-model replica of ours is live (it dual-writes the
    bitmap and repairs it itself)                                ipaddress
  the API serves networking.k8s.io/v1 ServiceCIDRs
    (kube-apiserver 1.33 or later: the maps are left over)       ipaddress
  otherwise (kube-apiserver 1.32 or earlier)                     bitmap
The bitmap is repaired only while something allocates from it alone: its
repair judges every Service by the bitmap's range, and would call the
Services of other ServiceCIDRs out of range.

It reads Services, IPAddresses and ServiceCIDRs through the Kubernetes API
(--kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster
config, as kubectl) and the bitmap model's RangeAllocations, the transition
state and the replica records through etcd (--etcd-servers). It works the
same against a real kube-apiserver.

By default it makes one pass and exits: 0 when the cluster is consistent or was
fixed, or only findings left by design remain; 2 when other problems are left;
1 on errors. Left by design, reported with the label or command that clears
them, are the states only a person may change and no wait fixes: a Service
outside its ServiceCIDR scope (after a namespace was relabelled) keeps its
address until it is recreated, and an IPAddress another controller manages
(or someone made by hand) is never written. In the bitmap model a suspected
leak is freed only when three passes agree and the third runs at least
--leak-grace (default 90 s: the 60 s request timeout plus a margin) after the
first, so a one-shot run that finds one takes that long. --interval keeps it
running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.rerun, o.stderr = rerunLine(cmd), streams.Err
			return runRepair(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addFlags(fs)
	fs.StringVar(&o.model, "model", "auto", "allocator model to repair: bitmap, ipaddress, or auto (the model the cluster's writers allocate from; see above)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would change and change nothing")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, "+machineFormats)
	fs.DurationVar(&o.interval, "interval", 0, "keep running, one pass every interval (0: one pass and exit)")
	fs.DurationVar(&o.leakGrace, "leak-grace", repair.DefaultLeakGrace,
		"bitmap model: least time between the first pass that sees a leak and the one that frees it; "+
			"keep it above the API server's request timeout (60 s), or a slow create's address can be freed and handed out twice. "+
			"With --etcd-servers a leak is also kept until every Service write in flight when its grace ended can no longer land")
	fs.BoolVar(&o.progress, "progress", false, "ipaddress model: print each pass's progress to stderr, a redrawn line on a terminal (the default there), plain lines elsewhere")
	fs.DurationVar(&o.orphanGrace, "orphan-grace", repair.DefaultOrphanGrace, "ipaddress model: least age of an IPAddress with no Service before it is deleted")
	return cmd
}

// passRunner is one model's repair pass.
type passRunner interface {
	RunOnce(ctx context.Context) (*report.Report, error)
}

func runRepair(ctx context.Context, o *repairOptions, streams Streams) error {
	if err := checkOutputFormat(o.output, "table"); err != nil {
		return err
	}
	if o.interval < 0 {
		return fmt.Errorf("--interval %v: must be positive, or 0 for one pass", o.interval)
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	var recorder record.EventRecorder
	if !o.dryRun {
		recorder = report.NewSyncEventRecorder(client, func(err error) { fmt.Fprintf(streams.Err, "warning: %v\n", err) })
	}
	defer o.etcd.close()
	runner, waitForPasses, err := o.runner(ctx, client, recorder)
	if err != nil {
		return err
	}
	if len(o.cluster.etcdServers) > 0 {
		etcd, err := o.etcd.open(ctx)
		if err != nil {
			return err
		}
		ports, err := o.nodePortRepair(ctx, etcd, client, recorder)
		if err != nil {
			return err
		}
		if ports != nil {
			runner = withNodePorts{ips: runner, ports: ports, handoff: o.handoff}
		}
	}
	if o.interval > 0 {
		for {
			rep, err := runner.RunOnce(ctx)
			if err == nil {
				explainOrWarn(ctx, client, rep, o.ipAddresses, streams)
			}
			now := time.Now().UTC()
			if err != nil {
				fmt.Fprintf(streams.Err, "%s repair pass failed: %v\n", now.Format(time.RFC3339), err)
			} else if err := printRepairPass(streams, o.output, rep, now); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.interval):
			}
		}
	}
	rep, err := runOneShot(ctx, runner, waitForPasses, o)
	if err != nil {
		return interrupted(ctx, err, streams, o.rerun, "the repair pass stopped between two addresses; every fix it made is complete.")
	}
	disagreements, err := o.compareModels(ctx, client)
	if err != nil {
		return err
	}
	for _, d := range disagreements {
		// An address the pass already reports (a leak, a missing
		// allocation) is not listed twice.
		if !slices.ContainsFunc(rep.Problems, func(p report.Problem) bool { return p.IP == d.IP }) {
			rep.Problems = append(rep.Problems, d)
		}
	}
	explainOrWarn(ctx, client, rep, o.ipAddresses, streams)
	if err := printRepair(streams, o.output, rep); err != nil {
		return err
	}
	if n := rep.Unresolved(); n > 0 {
		return errProblemsLeft(n)
	}
	return nil
}

// explainOrWarn completes the findings left by design with what clears
// them (explainByDesign); a failed read is a warning (a foreign IPAddress
// it could not read then stays unresolved: the job exits 2).
func explainOrWarn(ctx context.Context, client kubernetes.Interface, rep *report.Report, ipAddresses bool, streams Streams) {
	if err := explainByDesign(ctx, client, rep, ipAddresses); err != nil {
		fmt.Fprintf(streams.Err, "warning: %v\n", err)
	}
}

// runner builds the repair controller of the chosen model; waitForPasses
// says whether its leaks are freed only once three passes saw them.
func (o *repairOptions) runner(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder) (_ passRunner, waitForPasses bool, _ error) {
	m, err := model.Parse(o.model, true)
	if err != nil {
		return nil, false, err
	}
	cluster := o.cluster.ipCluster(m, client, &o.etcd)
	backend, err := ipallocator.OpenRepair(ctx, cluster)
	if err != nil {
		return nil, false, explain(err)
	}
	if d := backend.Detection(); d.Detected() {
		fmt.Fprintf(o.stderr, "--model auto: %s\n", d)
	}
	o.stores = backend.BitmapStores()
	o.ipAddresses = backend.RepairsIPAddresses()
	r, err := backend.Repair(ipallocator.RepairConfig{Options: o.shared(client, recorder), Progress: progress.Writer(o.progressWriter())})
	return r, backend.LeaksWaitForPasses(), err
}

// shared are the settings every repair of the job takes (repair.Options),
// from its flags. With --etcd-servers the repairs also read the servers'
// write leases, and free nothing a write in flight may still claim, and
// read the objects of their passes from etcd rather than through the API
// server.
func (o *repairOptions) shared(client kubernetes.Interface, recorder record.EventRecorder) repair.Options {
	opts := repair.Options{Client: client, Recorder: recorder, Interval: o.interval, DryRun: o.dryRun, LeakGrace: o.leakGrace, OrphanGrace: o.orphanGrace}
	if len(o.cluster.etcdServers) > 0 {
		o.etcd.flags = &o.cluster
		layout := etcdlayout.Layout{Prefix: o.cluster.etcdPrefix}
		opts.InFlight = jobInFlight{conn: &o.etcd, layout: layout}
		stored := jobStored{conn: &o.etcd, layout: layout}
		opts.Stored, opts.Services = stored, repair.StoredServices{Stored: stored, Client: client}
		if o.handoff == nil {
			o.handoff = &repair.ServicesHandoff{}
		}
		opts.Handoff = o.handoff
	}
	return opts
}

// jobStored is the etcd the job reads a pass's objects from, through its
// etcd client, opened when first needed.
type jobStored struct {
	conn   *etcdConn
	layout etcdlayout.Layout
}

func (j jobStored) Etcd(ctx context.Context) (clientv3.KV, etcdlayout.Layout, error) {
	c, err := j.conn.open(ctx)
	if err != nil {
		return nil, etcdlayout.Layout{}, err
	}
	return c.KV, j.layout, nil
}

// jobInFlight reads the servers' write leases through the job's etcd
// client, opened when first needed.
type jobInFlight struct {
	conn   *etcdConn
	layout etcdlayout.Layout
}

func (j jobInFlight) Leases(ctx context.Context) ([]string, error) {
	c, err := j.conn.open(ctx)
	if err != nil {
		return nil, err
	}
	return fence.InFlight{KV: c.KV, Layout: j.layout}.Leases(ctx)
}

// inFlightWait bounds how long a one-shot job keeps passing over leaks kept
// for the Service writes in flight, inFlightPoll apart: a server revokes a
// write lease a few seconds after its last request settled, so a healthy
// cluster's wait is short; a write whose outcome stays unknown longer is
// left to the next run (exit 2).
const (
	inFlightWait = 30 * time.Second
	inFlightPoll = 2 * time.Second
)

// runOneShot makes one pass, and in the bitmap model up to two more,
// --leak-grace/2 apart (so the third runs --leak-grace after the first, when
// the repair may free it), while suspected leaks are pending, so a one-shot
// job can free a leak the three-pass rule has confirmed; then more, for up to
// inFlightWait, while leaks are kept only for the writes in flight. The
// reports are merged.
func runOneShot(ctx context.Context, runner passRunner, waitForPasses bool, o *repairOptions) (*report.Report, error) {
	var reports []*report.Report
	deadline := time.Now().Add(inFlightWait)
	for pass := 1; ; pass++ {
		rep, err := runner.RunOnce(ctx)
		if err != nil {
			return nil, err
		}
		reports = append(reports, rep)
		// Leaks of the bitmap and of the node-port map wait for three passes;
		// the IPAddress model's orphans have their own grace.
		pending := slices.ContainsFunc(rep.Problems, func(p report.Problem) bool {
			return p.Type == report.TypeLeak && !p.Fixed && (waitForPasses || p.Resource == repair.ResourceNodePort)
		})
		inFlight := slices.ContainsFunc(rep.Problems, func(p report.Problem) bool { return p.InFlight && !p.Fixed })
		var wait time.Duration
		switch {
		case o.dryRun:
		case pending && pass < 3:
			wait = o.leakGrace / 2
		case inFlight && time.Now().Before(deadline):
			wait = inFlightPoll
		}
		if wait == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	return mergeReports(reports), nil
}

// mergeReports folds consecutive passes into one report: a problem fixed by
// any pass is fixed; counts are the last pass's; writes and time add up.
func mergeReports(reports []*report.Report) *report.Report {
	last := reports[len(reports)-1]
	merged := *last
	merged.Problems = nil
	merged.Writes, merged.Duration = 0, 0
	index := map[[4]string]int{}
	for _, r := range reports {
		merged.Writes += r.Writes
		merged.Duration += r.Duration
		for _, p := range r.Problems {
			k := [4]string{p.Type, p.IP, p.Service, p.Resource}
			if i, ok := index[k]; ok {
				fixed := merged.Problems[i].Fixed || p.Fixed
				merged.Problems[i] = p
				merged.Problems[i].Fixed = fixed
				continue
			}
			index[k] = len(merged.Problems)
			merged.Problems = append(merged.Problems, p)
		}
	}
	return &merged
}

func printRepair(streams Streams, format string, rep *report.Report) error {
	if isMachine(format) {
		return writeMachine(streams.Out, format, newRepairJSON(rep))
	}
	return writeProblems(streams.Out, rep.Problems, rep.DryRun, repairSummary(rep))
}

// printRepairPass prints one pass of repair --interval, stamped with the time
// it ended, so a long-running job's output says when each pass happened.
func printRepairPass(streams Streams, format string, rep *report.Report, at time.Time) error {
	stamp := at.UTC().Format(time.RFC3339)
	if isMachine(format) {
		out := newRepairJSON(rep)
		out.Time = stamp
		return writeMachine(streams.Out, format, out)
	}
	return writeProblems(streams.Out, rep.Problems, rep.DryRun, stamp+" "+repairSummary(rep))
}
