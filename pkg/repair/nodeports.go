package repair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"

	"github.com/allocator/allocator/pkg/repair/report"
)

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
// *nodeport.EtcdAllocator implements it.
type NodePortStore interface {
	Range() nodeport.Range
	Store
}

// NodePortConfig configures a NodePortRepair: Options (Interval, LeakGrace,
// ...) and the stored map.
type NodePortConfig struct {
	Options
	Store NodePortStore
}

// NodePortRepair rebuilds the node-port map from the Services: a thin layer
// over one repair.Repairer, which carries the leak counts from pass to
// pass (passes must not run concurrently).
type NodePortRepair struct {
	cfg  NodePortConfig
	core *Repairer[int]
}

// NewNodePortRepair checks cfg and returns a repair controller.
func NewNodePortRepair(cfg NodePortConfig) (*NodePortRepair, error) {
	if cfg.Client == nil || cfg.Store == nil {
		return nil, errors.New("node-port repair: a client and a store are required")
	}
	cfg.Options = cfg.Options.WithDefaults()
	core, err := New(Config[int]{Options: cfg.Options, Store: cfg.Store, Space: PortSpace{cfg.Store.Range()}})
	if err != nil {
		return nil, fmt.Errorf("node-port repair: %w", err)
	}
	return &NodePortRepair{cfg: cfg, core: core}, nil
}

// Run repairs every Interval until ctx ends; a failed pass is retried with
// backoff. firstPass, if not nil, is closed after the first good pass.
func (r *NodePortRepair) Run(ctx context.Context, firstPass chan<- struct{}) error {
	report.RunPasses(ctx, r.cfg.Interval, "Node-port repair", r.RunOnce, r.cfg.Metrics.PortReconcileError, firstPass)
	return nil
}

// RunOnce makes one pass. Its report's Model is "nodeport" and each
// problem's IP field holds the port. It reads the map, then the Services
// (Options.ListServices), reports what each holds and what no Service holds, and commits
// (Pass.Finish: events and metrics follow only a successful commit); a
// write lost to concurrent allocations reruns it all (Rounds).
func (r *NodePortRepair) RunOnce(ctx context.Context) (*report.Report, error) {
	start := time.Now()
	rng := r.cfg.Store.Range()
	var rep *report.Report
	rounds := NewRounds(1)
	for rounds.Next() {
		// The map is read before the Services are listed (package doc).
		pass, err := r.core.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %w", err)
		}
		services, err := r.cfg.ListServices(ctx)
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %w", err)
		}

		// What each Service holds, oldest first.
		var found Findings[int]
		for i := range services {
			svc := services[i]
			for _, port := range holding.NodePorts(svc) {
				p := report.Problem{Resource: ResourceNodePort, IP: strconv.Itoa(port), Service: report.ServiceKey(svc)}
				switch pass.Hold(svc, port) {
				case Held:
				case OutOfRange:
					p.Type, p.Reason = report.TypeOutOfRange, ReasonPortOutOfRange
					p.Message = fmt.Sprintf("Port %d is not within the port range %s; please recreate service", port, rng)
					found.Add(svc, p)
				case Duplicate:
					p.Type, p.Reason = report.TypeDuplicate, ReasonPortAlreadyAllocated
					p.Message = fmt.Sprintf("Port %d was assigned to multiple services; please recreate service", port)
					found.Add(svc, p)
				case Missing:
					p.Type, p.Reason, p.Fixed = report.TypeRepair, ReasonPortNotAllocated, !r.cfg.DryRun
					p.Message = fmt.Sprintf("Port %d is not allocated; repairing", port)
					found.AddMissing(svc, port, p) // dropped if the commit finds it was not missing
				}
			}
		}

		// What no Service holds is leaked: kept and counted, or freed.
		for _, leak := range pass.Leaks() {
			p := report.Problem{Resource: ResourceNodePort, Type: report.TypeLeak, IP: strconv.Itoa(leak.Key),
				Message: fmt.Sprintf("Port %d is allocated but no Service uses it; it is freed on the %s pass that sees it", leak.Key, report.Ordinal(LeakPasses))}
			switch {
			case leak.Freed:
				p.Fixed = !r.cfg.DryRun
				p.Message = fmt.Sprintf("the node port %d appears to have leaked: cleaning up", leak.Key)
			case leak.InFlight:
				p.InFlight = true
				p.Message = fmt.Sprintf("Port %d is allocated but no Service uses it; it is freed once the Service writes in flight, "+
					"which may still store its Service, can no longer land", leak.Key)
			}
			found.Add(nil, p)
		}

		// Commit, then count and record what is left.
		done, err := pass.Finish(ctx, &found, Reporting{DryRun: r.cfg.DryRun, Metrics: r.cfg.Metrics, Recorder: r.cfg.Recorder})
		if rounds.Lost(0, err) {
			continue // from a fresh read and list
		}
		if err != nil {
			return nil, fmt.Errorf("node-port repair: %w", err)
		}
		rep = &report.Report{Resource: ResourceNodePort, DryRun: r.cfg.DryRun, Services: len(services),
			Problems: done.Problems, Allocated: done.Allocated}
		if done.Wrote {
			rep.Writes++
		}
	}
	if err := rounds.Err(); err != nil {
		return nil, fmt.Errorf("node-port repair: %w", err)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}
