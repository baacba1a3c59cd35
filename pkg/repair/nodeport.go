package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitset"
	"github.com/allocator/allocator/pkg/portrange"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// Node-port repair follows the bitmap repair's rules with ports for
// addresses (and upstream's portallocator repair for reasons and texts):
// a port allocated with no Service is freed on the 3rd consecutive pass that
// sees it and no sooner than LeakGrace after the first; a port a Service
// holds that the map lacks is set again (PortNotAllocated); two Services on
// one port (PortAlreadyAllocated) and ports outside the range
// (PortOutOfRange) are reported, never changed. The map is written with a
// CAS on the revision the pass read; a lost compare merges the pass's
// changes onto a fresh read. The node-port map is the same in both IP
// models, so IP-model migration never touches it.

// Event reasons of the node-port repair, as upstream's.
const (
	ReasonPortNotAllocated     = "PortNotAllocated"
	ReasonPortOutOfRange       = "PortOutOfRange"
	ReasonPortAlreadyAllocated = "PortAlreadyAllocated"
	ReasonPortRangeFull        = "PortRangeFull"
)

// ResourceNodePort marks a node-port Problem.
const ResourceNodePort = "nodePort"

// NodePortStore is what the node-port repair needs of the stored map;
// *portalloc.EtcdAllocator implements it.
type NodePortStore interface {
	Range() portrange.Range
	ReadStored(ctx context.Context) (bitmap.StoredMap, error)
	CompareAndWrite(ctx context.Context, data []byte, revision int64) (int64, error)
}

// NodePortConfig configures a NodePortRepair.
type NodePortConfig struct {
	Client   kubernetes.Interface
	Store    NodePortStore
	Recorder record.EventRecorder // nil emits none
	Metrics  *Metrics             // nil counts nothing
	Interval time.Duration        // default DefaultInterval
	DryRun   bool
	// LeakGrace: see BitmapConfig.LeakGrace (default DefaultLeakGrace).
	LeakGrace time.Duration
	Now       func() time.Time
}

// NodePortRepair rebuilds the node-port map from the Services.
type NodePortRepair struct {
	cfg   NodePortConfig
	leaks map[int]leakState // by port; only the goroutine running a pass
}

// NewNodePortRepair checks cfg and returns a repair controller.
func NewNodePortRepair(cfg NodePortConfig) (*NodePortRepair, error) {
	if cfg.Client == nil || cfg.Store == nil {
		return nil, errors.New("node-port repair: a client and a store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LeakGrace <= 0 {
		cfg.LeakGrace = DefaultLeakGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &NodePortRepair{cfg: cfg, leaks: map[int]leakState{}}, nil
}

// Run repairs every Interval until ctx ends; a failed pass is retried with
// backoff. firstPass, if not nil, is closed after the first good pass.
func (r *NodePortRepair) Run(ctx context.Context, firstPass chan<- struct{}) error {
	runReports(ctx, r.cfg.Interval, "Node-port repair", r.RunOnce, r.cfg.Metrics.portReconcileError, firstPass)
	return nil
}

// RunOnce makes one pass. Its report's Model is "nodeport" and each
// problem's IP field holds the port.
func (r *NodePortRepair) RunOnce(ctx context.Context) (*Report, error) {
	start := time.Now()
	for attempt := 1; attempt <= maxConflictReruns; attempt++ {
		stored, err := r.cfg.Store.ReadStored(ctx)
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %w", err)
		}
		services, err := listServices(ctx, r.cfg.Client)
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %w", err)
		}
		report, err := r.pass(ctx, stored, services)
		if errors.Is(err, bitmap.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		report.Duration = time.Since(start)
		return report, nil
	}
	return nil, fmt.Errorf("node-port repair: gave up after %d writes lost to concurrent allocations", maxConflictReruns)
}

func (r *NodePortRepair) pass(ctx context.Context, stored bitmap.StoredMap, services []corev1.Service) (*Report, error) {
	rng := r.cfg.Store.Range()
	newSet := func() *bitset.Set {
		s, _ := bitset.New(rng.Size(), rng.StaticSize()) // a valid Range always fits
		return s
	}
	storedSet, rebuilt := newSet(), newSet()
	if err := storedSet.SetBytes(stored.Data); err != nil {
		return nil, fmt.Errorf("node-port repair: stored map of %s: %w", rng, err)
	}
	report := &Report{Model: "nodeport", DryRun: r.cfg.DryRun, Services: len(services)}
	type eventFor struct {
		svc     *corev1.Service
		problem Problem
	}
	var events []eventFor
	add := func(svc *corev1.Service, p Problem) {
		p.Resource = ResourceNodePort
		report.Problems = append(report.Problems, p)
		if svc != nil && p.Reason != "" {
			events = append(events, eventFor{svc, p})
		}
	}
	var toSet, toClear []int
	holders := map[int]*corev1.Service{} // the Service each toSet slot was found on
	for i := range services {
		svc := &services[i]
		for _, port := range servicealloc.NodePortsOf(svc) {
			text := strconv.Itoa(port)
			slot, ok := rng.Index(port)
			switch {
			case !ok:
				add(svc, Problem{Type: TypeOutOfRange, Reason: ReasonPortOutOfRange, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Port %d is not within the port range %s; please recreate service", port, rng)})
			case !rebuilt.Set(slot):
				add(svc, Problem{Type: TypeDuplicate, Reason: ReasonPortAlreadyAllocated, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Port %d was assigned to multiple services; please recreate service", port)})
			case storedSet.Clear(slot):
				// Held and allocated: what stays in storedSet are leaks.
			default:
				toSet = append(toSet, slot)
				holders[slot] = svc
				add(svc, Problem{Type: TypeRepair, Reason: ReasonPortNotAllocated, IP: text, Service: key(svc), Fixed: !r.cfg.DryRun,
					Message: fmt.Sprintf("Port %d is not allocated; repairing", port)})
			}
		}
	}
	now := r.cfg.Now()
	leaks := map[int]leakState{}
	storedSet.ForEach(func(slot int) {
		port, _ := rng.Port(slot)
		state, seen := r.leaks[port]
		if !seen {
			state = leakState{passesLeft: leakPasses - 1, firstSeen: now}
		}
		if state.passesLeft > 0 || now.Sub(state.firstSeen) < r.cfg.LeakGrace {
			state.passesLeft = max(state.passesLeft-1, 0)
			leaks[port] = state
			rebuilt.Set(slot)
			add(nil, Problem{Type: TypeLeak, IP: strconv.Itoa(port),
				Message: fmt.Sprintf("Port %d is allocated but no Service uses it; it is freed on the %s pass that sees it", port, ordinal(leakPasses))})
			return
		}
		toClear = append(toClear, slot)
		add(nil, Problem{Type: TypeLeak, IP: strconv.Itoa(port), Fixed: !r.cfg.DryRun,
			Message: fmt.Sprintf("the node port %d appears to have leaked: cleaning up", port)})
	})
	report.Allocated = rebuilt.Used()
	if r.cfg.DryRun {
		return report, nil
	}
	data := rebuilt.Bytes()
	if !stored.Exists() || !bytes.Equal(data, stored.Data) {
		stillHeld := func(ctx context.Context, slot int) (bool, error) {
			port, _ := rng.Port(slot)
			return r.stillHolds(ctx, holders[slot], port)
		}
		wrote, notMissingSlot, err := mergeWrite(ctx, r.cfg.Store, rng.Size(), rng.StaticSize(), data, stored, toSet, toClear, stillHeld)
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %s: %w", rng, err)
		}
		if wrote {
			report.Writes++
		}
		notMissing := func(p Problem) bool {
			port, err := strconv.Atoi(p.IP)
			slot, _ := rng.Index(port)
			return p.Reason == ReasonPortNotAllocated && err == nil && notMissingSlot[slot]
		}
		report.Problems = slices.DeleteFunc(report.Problems, notMissing)
		events = slices.DeleteFunc(events, func(e eventFor) bool { return notMissing(e.problem) })
	}
	r.leaks = leaks
	for _, p := range report.Problems {
		r.cfg.Metrics.portProblem(p)
	}
	if r.cfg.Recorder != nil {
		for _, e := range events {
			r.cfg.Recorder.Event(e.svc, corev1.EventTypeWarning, e.problem.Reason, e.problem.Message)
		}
	}
	return report, nil
}

// stillHolds reads svc again and reports whether it still holds port: a
// Service deleted (or re-created) since the pass listed it does not.
func (r *NodePortRepair) stillHolds(ctx context.Context, svc *corev1.Service, port int) (bool, error) {
	if svc == nil {
		return true, nil
	}
	cur, err := sameService(ctx, r.cfg.Client, svc)
	if cur == nil || err != nil {
		return false, err
	}
	return slices.Contains(servicealloc.NodePortsOf(cur), port), nil
}
