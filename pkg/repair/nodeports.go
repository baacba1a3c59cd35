package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

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

// NodePortConfig configures a NodePortRepair.
type NodePortConfig struct {
	Client   kubernetes.Interface
	Store    NodePortStore
	Recorder record.EventRecorder // nil emits none
	Metrics  *report.Metrics      // nil counts nothing
	Interval time.Duration        // default DefaultInterval
	DryRun   bool
	// LeakGrace: see BitmapConfig.LeakGrace (default repair.DefaultLeakGrace).
	LeakGrace time.Duration
	Now       func() time.Time
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
	if cfg.Interval <= 0 {
		cfg.Interval = report.DefaultInterval
	}
	core, err := New(Config[int]{
		Store: cfg.Store, Space: portSpace{cfg.Store.Range()}, Services: cfg.Client.CoreV1(),
		Holds: holdsPort, LeakGrace: cfg.LeakGrace, Now: cfg.Now,
	})
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
// problem's IP field holds the port.
func (r *NodePortRepair) RunOnce(ctx context.Context) (*report.Report, error) {
	start := time.Now()
	var rep *report.Report
	list := func(ctx context.Context) ([]corev1.Service, error) { return report.ListServices(ctx, r.cfg.Client) }
	err := Run(ctx, []*Repairer[int]{r.core}, list, func(ctx context.Context, _ int, pass *Pass[int], services []corev1.Service) error {
		var err error
		rep, err = r.pass(ctx, pass, services)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("node-port repair: %w", err)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// pass reports what pass finds in the node-port map and commits it
// (repair.Pass.Finish: events and metrics follow only a successful
// commit).
func (r *NodePortRepair) pass(ctx context.Context, pass *Pass[int], services []corev1.Service) (*report.Report, error) {
	rng := r.cfg.Store.Range()
	rep := &report.Report{Resource: ResourceNodePort, DryRun: r.cfg.DryRun, Services: len(services)}
	var found Findings[int]
	add := func(svc *corev1.Service, p report.Problem) {
		p.Resource = ResourceNodePort
		found.Add(svc, p)
	}
	for i := range services {
		svc := &services[i]
		for _, port := range holding.NodePorts(svc) {
			text := strconv.Itoa(port)
			switch pass.Hold(svc, port) {
			case Held:
			case OutOfRange:
				add(svc, report.Problem{Type: report.TypeOutOfRange, Reason: ReasonPortOutOfRange, IP: text, Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Port %d is not within the port range %s; please recreate service", port, rng)})
			case Duplicate:
				add(svc, report.Problem{Type: report.TypeDuplicate, Reason: ReasonPortAlreadyAllocated, IP: text, Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Port %d was assigned to multiple services; please recreate service", port)})
			case Missing:
				found.AddMissing(svc, port, report.Problem{Type: report.TypeRepair, Reason: ReasonPortNotAllocated, IP: text, Service: report.ServiceKey(svc), Fixed: !r.cfg.DryRun,
					Resource: ResourceNodePort, Message: fmt.Sprintf("Port %d is not allocated; repairing", port)})
			}
		}
	}
	pass.Leaked(func(port int, freed bool) {
		if !freed {
			add(nil, report.Problem{Type: report.TypeLeak, IP: strconv.Itoa(port),
				Message: fmt.Sprintf("Port %d is allocated but no Service uses it; it is freed on the %s pass that sees it", port, report.Ordinal(LeakPasses))})
			return
		}
		add(nil, report.Problem{Type: report.TypeLeak, IP: strconv.Itoa(port), Fixed: !r.cfg.DryRun,
			Message: fmt.Sprintf("the node port %d appears to have leaked: cleaning up", port)})
	})
	done, err := pass.Finish(ctx, &found, Reporting{DryRun: r.cfg.DryRun, Observe: r.cfg.Metrics.ObservePortProblem, Recorder: r.cfg.Recorder})
	if err != nil {
		return nil, err
	}
	rep.Problems, rep.Allocated = done.Problems, done.Allocated
	if done.Wrote {
		rep.Writes++
	}
	return rep, nil
}

// portSpace is a node-port range as the repair core's Space: slot i is the
// port base+i.
type portSpace struct{ nodeport.Range }

func (s portSpace) Key(i int) int {
	port, _ := s.Port(i) // the core asks only for slots of the range
	return port
}

// holdsPort reports whether svc holds port.
func holdsPort(svc *corev1.Service, port int) bool {
	return slices.Contains(holding.NodePorts(svc), port)
}
