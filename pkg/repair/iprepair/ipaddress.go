package iprepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// repairRetryMax caps the backoff of a key the IPAddress repair failed to
// reconcile.
const repairRetryMax = 10 * time.Second

// DefaultIPAddressWorkers is the default IPAddressConfig.Workers.
const DefaultIPAddressWorkers = 2

// ErrNoServiceCIDR is returned by a pass that finds no ServiceCIDR at all: on
// such a cluster every ClusterIP would look out of range, so the pass waits
// for the default ServiceCIDR instead (upstream waits for it too).
var ErrNoServiceCIDR = errors.New("no ServiceCIDR exists yet")

// errChanged marks an object that changed between the fresh read and the
// conditional write; the address is reconciled again (Run: requeued with
// backoff; RunOnce: the pass reports the error).
var errChanged = errors.New("changed while being repaired")

// IPAddressConfig configures an IPAddressRepair: repair.Options (Client,
// Interval, OrphanGrace, DryRun, Now, ...) and what only this repair uses.
type IPAddressConfig struct {
	repair.Options
	// Informers is an optional shared factory on Client, used by Run (so the
	// server's allocator and the repair share one watch). Nil: Run makes one
	// and shuts it down when it returns.
	Informers informers.SharedInformerFactory
	// Workers is the number of Run's event-driven workers (default
	// DefaultIPAddressWorkers).
	Workers int
	// Progress, if set, reports each full pass over the addresses; the
	// standalone job sets it (internal/progress), the server does not.
	Progress report.StartProgress
	// CarryOver, if set and true, says that bitmap-model writers may be
	// live (a transition is on, see internal/transition): they record their
	// allocations in the bitmap only, so a Service address without an
	// IPAddress is their normal state, not a fault. Its IPAddress is then
	// created without a ClusterIPNotAllocated event or problem, and counted
	// as carried over (CarriedOver).
	CarryOver func() bool
	// FirstPassCarriesOver says that Run's first successful full pass stands
	// for a carry-over at start: a server opens its allocators only after
	// it, in place of migrating the Services' addresses first (every address
	// is looked up once, not twice). Until that pass succeeds, Run creates
	// missing IPAddresses as CarryOver does; RunOnce never does.
	FirstPassCarriesOver bool
	// Start, if set, holds Run's first full pass until it is closed: the
	// server closes it once the default ServiceCIDR it writes at start is in
	// the informers, so that the pass that opens the allocators knows every
	// range.
	Start <-chan struct{}
}

// IPAddressRepair keeps the IPAddress model consistent with the Services
// (design.md §8): every ClusterIP inside some ServiceCIDR has an IPAddress
// named after it, with parentRef {group: "", resource: services, namespace,
// name} and the labels ipaddress.kubernetes.io/ip-family and
// ipaddress.kubernetes.io/managed-by=ipallocator.k8s.io. Creating the
// missing ones is also the migration from the bitmap model.
//
// Run watches Services, IPAddresses and ServiceCIDRs, reconciles each
// changed address in a rate-limited work queue and makes a full pass every
// Interval; RunOnce makes one full pass from fresh lists, without
// informers, for the standalone job.
//
// Invariants and why:
//
//   - The unit of work is one address: the Services holding it and the
//     IPAddress named after it are judged together, so two Services sharing
//     an address and an IPAddress pointing elsewhere are one decision.
//   - Reads come from a snapshot (lists or caches) that may be stale, so no
//     write trusts it alone. Before creating an IPAddress the Service is
//     read again (same UID, still holding the address): a Service deleted
//     since the snapshot must not get its address back. The create itself
//     is the atomic claim: AlreadyExists means someone (normally the
//     allocator, whose claim precedes the Service) holds the address, and
//     the repair judges the object it finds, never overwrites it.
//   - One Service keeps a shared address: the one the IPAddress already
//     references, else the oldest (then namespace/name). The others get
//     ClusterIPAlreadyAllocated and are never changed: only a person can
//     decide which Service to recreate.
//   - Deleting is the dangerous write: an IPAddress exists before its
//     Service is stored (the allocator claims first), so an IPAddress
//     without a Service may belong to a create in flight. An orphaned
//     IPAddress managed by ipallocator.k8s.io is deleted only when it is
//     older than OrphanGrace and every Service write in flight when that
//     grace ended has ended too (Options.InFlight: one of them may still
//     store its Service), after a fresh GET of it and of its parent
//     Service still finds no owner, and with the UID and resourceVersion of
//     that GET as delete preconditions, so an object re-created or changed
//     in between is never removed. Upstream deletes an IPAddress whose parent
//     exists but does not hold the address at once; we apply the grace
//     period there too, because a Service being updated to add a secondary
//     address is in exactly that state until its update is stored.
//   - parentRef is immutable, so an IPAddress of ours that references the
//     wrong parent while a Service holds the address is fixed by delete and
//     create (IPAddressWrongReference when the parent Service exists but
//     does not hold it, as upstream; ClusterIPNotAllocated "has a wrong
//     reference" when the parent is gone or no Service). It is done only
//     when it is safe: the IPAddress is older than OrphanGrace, a fresh GET
//     shows it unchanged, the holder still holds the address and the
//     referenced Service does not; the delete is conditional as above. If an
//     allocation takes the address between the delete and the create, the
//     create fails with AlreadyExists and the conflict is reported as
//     ClusterIPAlreadyAllocated, not overwritten.
//   - A wrong family label on an IPAddress of ours is fixed by an update
//     conditional on its resourceVersion (labels are mutable; upstream
//     re-creates the object, which frees the address for a moment).
//   - IPAddresses not labelled managed-by=ipallocator.k8s.io are never
//     written. One holding a Service's address for another parent is
//     reported as ClusterIPAlreadyAllocated; one referencing a Service that
//     does not hold it is reported as a leak; both stay unresolved.
//   - A ClusterIP inside no ServiceCIDR (ready or not: a terminating one
//     still covers its addresses) is ClusterIPOutOfRange and gets no
//     IPAddress; one that does not parse is ClusterIPNotValid. A pass that
//     finds no ServiceCIDR at all fails with ErrNoServiceCIDR rather than
//     call every address out of range.
//   - Events are emitted when the repair changed something or found what
//     only a person can fix, never for a pending orphan, and never in
//     dry-run. Events concern the Service, except IPAddressNotAllocated and
//     IPAddressWrongReference, which concern the IPAddress (as upstream).
//   - Passes and workers may act on one address at once (Run's periodic
//     pass runs beside the workers, and several replicas may run the
//     repair): every write is create-if-absent or conditional on what a fresh
//     read saw, so the loser of a race fails and re-reads, and nothing is
//     lost or duplicated.
type IPAddressRepair struct {
	cfg     IPAddressConfig
	carried atomic.Uint64
	orphans *orphanWait
	// carryOverPass is true while Run has not made a successful full pass, when
	// cfg.FirstPassCarriesOver.
	carryOverPass atomic.Bool
}

// CarriedOver is how many IPAddresses the repair created, while CarryOver
// was true or in a first pass that carries over, for addresses a
// bitmap-model writer had allocated.
func (r *IPAddressRepair) CarriedOver() uint64 { return r.carried.Load() }

// carryingOver reports whether a missing IPAddress is created as carried
// over: while bitmap-model writers may be live (CarryOver), or in Run's
// first pass when it stands for the carry-over at start.
func (r *IPAddressRepair) carryingOver() bool {
	return r.carryOverPass.Load() || (r.cfg.CarryOver != nil && r.cfg.CarryOver())
}

// NewIPAddressRepair checks cfg and returns a repair controller.
func NewIPAddressRepair(cfg IPAddressConfig) (*IPAddressRepair, error) {
	if cfg.Client == nil {
		return nil, errors.New("ipaddress repair: a client is required")
	}
	cfg.Options = cfg.Options.WithDefaults()
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultIPAddressWorkers
	}
	return &IPAddressRepair{cfg: cfg, orphans: newOrphanWait(repair.NewHorizon(cfg.InFlight, cfg.Now))}, nil
}

// RunOnce makes one full pass from consistent lists of IPAddresses,
// ServiceCIDRs and Services, or from one read of them in etcd when
// Options.Stored is set; it needs no informers. An address whose repair
// failed does not stop the pass: the report covers every address and the
// error lists the failures.
func (r *IPAddressRepair) RunOnce(ctx context.Context) (*report.Report, error) {
	var view *listView
	var err error
	if r.cfg.Stored != nil {
		view, err = r.storedView(ctx)
	}
	if r.cfg.Stored == nil || repair.ListInstead(err) {
		// No etcd, or none it may read: the API server's lists.
		view, err = newListView(ctx, r.cfg.Client)
	}
	if err != nil {
		return nil, fmt.Errorf("ipaddress repair: %w", err)
	}
	return r.pass(ctx, view)
}

// storedView reads the pass's snapshot from Options.Stored, with the
// Services handed off to it (Options.Handoff) when there are: the rest at
// their revision, unless etcd has compacted it since, then all anew.
func (r *IPAddressRepair) storedView(ctx context.Context) (*listView, error) {
	kv, layout, err := r.cfg.Stored.Etcd(ctx)
	if err != nil {
		return nil, err
	}
	if handed, ok := r.cfg.Handoff.Take(); ok {
		v, err := newStoredView(ctx, kv, layout, &handed)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			return v, err
		}
	}
	return newStoredView(ctx, kv, layout, nil)
}

// Run watches Services, IPAddresses and ServiceCIDRs until ctx ends. It first
// makes full passes from the caches until one succeeds (retried with
// backoff, never abandoned) and closes firstPass, if not nil, after it;
// then workers reconcile every changed address and a full pass runs every
// Interval. Run never stops by itself and returns nil when ctx ends, once
// every goroutine it started has stopped.
func (r *IPAddressRepair) Run(ctx context.Context, firstPass chan<- struct{}) error {
	logger := klog.FromContext(ctx).WithValues("controller", "ipaddress-repair")
	ctx = klog.NewContext(ctx, logger)
	factory := r.cfg.Informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(r.cfg.Client, 0)
		defer factory.Shutdown() // after cancel below: waits for the informers
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	view, err := newRepairView(factory)
	if err != nil {
		return err
	}

	// A failed key is retried with its own exponential backoff, capped at
	// repairRetryMax, and no overall rate: client-go's default controller
	// limiter also holds every retry to 10 a second, so after an etcd
	// outage (NOSPACE) the hundreds of keys that failed during it waited
	// tens of seconds in line, leaving the bitmap and the IPAddresses
	// apart meanwhile (TestEtcdOutOfSpace). Each retry is one key's
	// reconcile, with the outage already over or its own backoff growing.
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, repairRetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ipaddress-repair"},
	)
	defer queue.ShutDown()
	run := &repairRun{r: r, queue: queue, view: view, logger: logger, firstPass: firstPass}
	synced, unwatch, err := run.watch(factory)
	defer unwatch()
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended
	}

	if r.cfg.Start != nil {
		select {
		case <-r.cfg.Start:
		case <-ctx.Done():
			return nil
		}
	}
	r.carryOverPass.Store(r.cfg.FirstPassCarriesOver)
	defer run.workers.Wait()
	defer queue.ShutDown() // runs before Wait: workers see the shutdown
	report.Loop(ctx, r.cfg.Interval, run.fullPass, run.passFailed)
	return nil
}

// newRepairView returns Run's view of factory's caches, with the repair's
// index added to the Service informer unless it has it already.
func newRepairView(factory informers.SharedInformerFactory) (*informerView, error) {
	svcInf := factory.Core().V1().Services()
	ipInf := factory.Networking().V1().IPAddresses()
	cidrInf := factory.Networking().V1().ServiceCIDRs()
	if _, exists := svcInf.Informer().GetIndexer().GetIndexers()[serviceIndex]; !exists {
		if err := svcInf.Informer().AddIndexers(serviceIndexers); err != nil {
			return nil, fmt.Errorf("ipaddress repair: index services: %w", err)
		}
	}
	nsInf := factory.Core().V1().Namespaces()
	return &informerView{
		serviceIndexer: svcInf.Informer().GetIndexer(),
		serviceLister:  svcInf.Lister(),
		ipIndexer:      ipInf.Informer().GetIndexer(),
		cidrLister:     cidrInf.Lister(),
		nsLister:       nsInf.Lister(),
	}, nil
}

// repairRun is one Run's state: the queue its event handlers
// (ipaddress_events.go) fill and its workers drain, and the view of the
// caches both read.
type repairRun struct {
	r         *IPAddressRepair
	queue     workqueue.TypedRateLimitingInterface[string]
	view      *informerView
	logger    klog.Logger
	firstPass chan<- struct{} // closed, and set to nil, after the first good pass
	// started is set once the first good pass started the workers; only
	// report.Loop's goroutine reads and writes it.
	started bool
	workers sync.WaitGroup
}

// fullPass reconciles every address of the caches; the first that succeeds
// starts the workers and closes firstPass.
func (run *repairRun) fullPass(ctx context.Context) error {
	rep, err := run.r.pass(ctx, run.view)
	if err != nil {
		return err
	}
	run.logger.V(2).Info("IPAddress repair pass done", "report", rep.String())
	if !run.started {
		run.started = true
		if run.r.carryOverPass.Swap(false) && run.r.CarriedOver() > 0 {
			run.logger.Info("Carried allocations over from the bitmap model", "created", run.r.CarriedOver())
		}
		run.startWorkers(ctx)
	}
	report.CloseOnce(&run.firstPass)
	return nil
}

// passFailed logs a failed full pass and counts it, unless it is an
// ordinary race or the wait for the first ServiceCIDR.
func (run *repairRun) passFailed(err error, retryIn time.Duration) {
	switch {
	case errors.Is(err, errChanged):
		run.logger.V(2).Info("IPAddress changed while being repaired, pass retried", "retryIn", retryIn, "reason", err.Error())
	case errors.Is(err, ErrNoServiceCIDR) && !run.started:
		// At start-up the pass may run before the server created the
		// default ServiceCIDR: waiting is expected, not an error.
		run.logger.V(2).Info("IPAddress repair waits for a ServiceCIDR", "retryIn", retryIn)
	default:
		run.r.cfg.Metrics.ReconcileError()
		run.logger.Error(err, "IPAddress repair pass failed", "retryIn", retryIn)
	}
}

// startWorkers starts Workers goroutines reconciling queued addresses until
// the queue shuts down.
func (run *repairRun) startWorkers(ctx context.Context) {
	for range run.r.cfg.Workers {
		run.workers.Go(func() {
			for run.r.processNext(ctx, run.queue, run.view) {
			}
		})
	}
}

// processNext reconciles one queued address; false when the queue shut down.
func (r *IPAddressRepair) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], view ipView) bool {
	k, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(k)
	out, err := r.reconcile(ctx, view, k)
	r.commit(out)
	logger := klog.FromContext(ctx)
	for _, p := range out.problems {
		logger.V(2).Info("IPAddress repair", "ip", p.IP, "service", p.Service, "type", p.Type, "fixed", p.Fixed, "message", p.Message)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errChanged):
			// An ordinary race with a writer (a Service or IPAddress
			// changed between the read and the write): not an error.
			logger.V(2).Info("IPAddress changed while being repaired, retrying", "key", k, "reason", err.Error())
		default:
			r.cfg.Metrics.ReconcileError()
			logger.Error(err, "IPAddress repair failed, retrying", "key", k)
		}
		queue.AddRateLimited(k)
		return true
	}
	queue.Forget(k)
	if out.retryAfter > 0 {
		queue.AddAfter(k, out.retryAfter)
	}
	return true
}

// passChunk is how many keys a full pass's worker takes at a time: enough
// that taking the next costs nothing beside reconciling them, few enough
// that the workers finish together.
const passChunk = 512

// chunkResult is what a full pass found and did in one chunk of its keys.
type chunkResult struct {
	problems []report.Problem
	writes   int
	changed  int // IPAddresses created less those deleted
	failed   []error
}

// pass reconciles every address of view, with Workers goroutines: each
// takes the next chunk of the sorted keys until none is left (a reconcile
// only reads view, and reconciles of different addresses run side by side
// as Run's workers do). The report lists the problems in key order, as one
// goroutine would find them. At a million Services a pass is a second or
// more of CPU per 100,000 addresses, and the server is not ready before
// its first pass.
func (r *IPAddressRepair) pass(ctx context.Context, view ipView) (*report.Report, error) {
	start := time.Now()
	ranges, err := view.cidrs()
	if err != nil {
		return nil, fmt.Errorf("ipaddress repair: %w", err)
	}
	if ranges.empty() {
		return nil, fmt.Errorf("ipaddress repair: %w", ErrNoServiceCIDR)
	}
	keys, err := view.keys()
	if err != nil {
		return nil, fmt.Errorf("ipaddress repair: %w", err)
	}
	services, allocated, err := view.counts()
	if err != nil {
		return nil, fmt.Errorf("ipaddress repair: %w", err)
	}
	progress := r.cfg.Progress.Start("addresses checked", len(keys))
	defer progress.Stop()
	results := make([]chunkResult, (len(keys)+passChunk-1)/passChunk)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(max(r.cfg.Workers, 1), len(results)) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < len(results) && ctx.Err() == nil; c = int(next.Add(1) - 1) {
				chunk := keys[c*passChunk : min((c+1)*passChunk, len(keys))]
				results[c] = r.reconcileChunk(ctx, view, chunk)
				progress.Add(len(chunk))
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ipaddress repair: %w", err)
	}
	rep := &report.Report{Model: model.IPAddress, DryRun: r.cfg.DryRun, Services: services}
	var failed []error
	for _, res := range results {
		rep.Problems = append(rep.Problems, res.problems...)
		rep.Writes += res.writes
		allocated += res.changed
		failed = append(failed, res.failed...)
	}
	rep.Allocated = allocated
	rep.Duration = time.Since(start)
	if len(failed) > 0 {
		return rep, fmt.Errorf("ipaddress repair: %d of %d addresses failed: %w", len(failed), len(keys), errors.Join(failed...))
	}
	return rep, nil
}

// reconcileChunk reconciles keys in turn, committing each outcome.
func (r *IPAddressRepair) reconcileChunk(ctx context.Context, view ipView, keys []string) chunkResult {
	var res chunkResult
	view = chunkView(view)
	for _, k := range keys {
		out, err := r.reconcile(ctx, view, k)
		r.commit(out)
		res.problems = append(res.problems, out.problems...)
		res.writes += out.writes
		res.changed += out.created - out.deleted
		if err != nil {
			res.failed = append(res.failed, err)
		}
	}
	return res
}
