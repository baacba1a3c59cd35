package iprepair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// BitmapStore is what the bitmap repair needs of one family's stored map;
// *clusterip.EtcdAllocator implements it.
type BitmapStore interface {
	Range() subrange.Range
	repair.Store
}

var _ BitmapStore = (*clusterip.EtcdAllocator)(nil)

// BitmapConfig configures a BitmapRepair.
type BitmapConfig struct {
	// Client reads Services.
	Client kubernetes.Interface
	// Stores are the cluster's families, primary first.
	Stores []BitmapStore
	// Recorder receives the events; nil emits none.
	Recorder record.EventRecorder
	// Metrics counts problems; nil counts nothing.
	Metrics *report.Metrics
	// Interval is the period of Run (default DefaultInterval).
	Interval time.Duration
	// DryRun reports what a pass would change and changes nothing (no write,
	// no event, no leak counting).
	DryRun bool
	// LeakGrace is the least time between the first pass that sees an
	// address leaked and the pass that frees it (default repair.DefaultLeakGrace),
	// on top of the repair.LeakPasses rule: passes run back to back (a
	// rerun, a one-shot job run three times) must not free the address of a
	// Service whose create is merely slow.
	LeakGrace time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Companion says the maps are dual-written beside the IPAddress model
	// (pkg/ipaddress/dualwrite), whose repair reports on the Services: addresses
	// outside a map belong to other ServiceCIDRs, and duplicates and missing
	// bits are that repair's to report. The pass still sets missing bits
	// and frees leaks; it reports only what is the map's own.
	Companion bool
}

// BitmapRepair rebuilds the bitmap model's RangeAllocations from the Services,
// one repair.Repairer per family. See the package doc for its rules.
type BitmapRepair struct {
	cfg BitmapConfig
	// families are the repair cores of cfg.Stores, in order; they carry the
	// leak counts from pass to pass, so RunOnce must not be called
	// concurrently.
	families []*repair.Repairer[netip.Addr]
}

// NewBitmapRepair checks cfg and returns a repair controller.
func NewBitmapRepair(cfg BitmapConfig) (*BitmapRepair, error) {
	if cfg.Client == nil || len(cfg.Stores) == 0 {
		return nil, errors.New("bitmap repair: a client and at least one store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = report.DefaultInterval
	}
	r := &BitmapRepair{cfg: cfg}
	for _, store := range cfg.Stores {
		family, err := repair.New(repair.Config[netip.Addr]{
			Store: store, Space: addrSpace{store.Range()}, Services: cfg.Client.CoreV1(),
			Holds: holdsIP, LeakGrace: cfg.LeakGrace, Now: cfg.Now,
		})
		if err != nil {
			return nil, fmt.Errorf("bitmap repair: %w", err)
		}
		r.families = append(r.families, family)
	}
	return r, nil
}

// Run repairs every Interval until ctx ends. A failed pass is retried with
// backoff; the loop never stops by itself. firstPass, if not nil, is closed
// after the first successful pass (the server's readiness waits for it).
func (r *BitmapRepair) Run(ctx context.Context, firstPass chan<- struct{}) error {
	report.RunPasses(ctx, r.cfg.Interval, "Bitmap repair", r.RunOnce, r.cfg.Metrics.ReconcileError, firstPass)
	return nil
}

// RunOnce makes one repair pass over every family.
func (r *BitmapRepair) RunOnce(ctx context.Context) (*report.Report, error) {
	start := time.Now()
	rep := &report.Report{Model: model.Bitmap, DryRun: r.cfg.DryRun}
	list := func(ctx context.Context) ([]corev1.Service, error) {
		services, err := report.ListServices(ctx, r.cfg.Client)
		rep.Services = len(services)
		return services, err
	}
	err := repair.Run(ctx, r.families, list, func(ctx context.Context, i int, pass *repair.Pass[netip.Addr], services []corev1.Service) error {
		outcome, err := r.repairFamily(ctx, i, pass, services)
		if err != nil {
			return err
		}
		rep.Problems = append(rep.Problems, outcome.problems...)
		rep.Allocated += outcome.allocated
		if outcome.wrote {
			rep.Writes++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bitmap repair: %w", err)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

type familyOutcome struct {
	problems  []report.Problem
	allocated int
	wrote     bool
}

// repairFamily reports what pass finds in the map of cfg.Stores[i] and
// commits it (repair.Pass.Finish: events and metrics follow only a
// successful commit).
func (r *BitmapRepair) repairFamily(ctx context.Context, i int, pass *repair.Pass[netip.Addr], services []corev1.Service) (familyOutcome, error) {
	rng := r.cfg.Stores[i].Range()
	primary := i == 0
	family := familyName(rng.IPv6())
	var found repair.Findings[netip.Addr]
	// companion drops what the IPAddress repair reports when it runs beside.
	companion := func(p report.Problem) bool {
		return r.cfg.Companion && (p.Type == report.TypeOutOfRange || p.Type == report.TypeDuplicate || p.Reason == report.ReasonNotAllocated)
	}
	rep := func(svc *corev1.Service, p report.Problem) {
		if !companion(p) {
			found.Add(svc, p)
		}
	}

	for i := range services {
		svc := &services[i]
		ips, invalid := holding.ClusterIPs(svc)
		for _, ip := range ips {
			if ip.Is6() != rng.IPv6() {
				if !r.servesFamily(ip.Is6()) && primary {
					fam := familyName(ip.Is6())
					rep(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: ip.String(), Service: report.ServiceKey(svc),
						Message: fmt.Sprintf("Cluster IP %s(%s) is of ip family that is no longer configured on cluster; please recreate service", ip, fam)})
				}
				continue
			}
			switch pass.Hold(svc, ip) {
			case repair.Held:
			case repair.Missing:
				p := report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: ip.String(), Service: report.ServiceKey(svc), Fixed: !r.cfg.DryRun,
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", family, ip)}
				if !companion(p) {
					found.AddMissing(svc, ip, p)
				}
			case repair.Duplicate:
				rep(svc, report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: ip.String(), Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", family, ip)})
			case repair.OutOfRange:
				rep(svc, report.Problem{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: ip.String(), Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not within the service CIDR %s; please recreate service", family, ip, rng.Prefix())})
			}
		}
		for _, text := range invalid {
			if primary { // reported once, by the primary family's pass
				rep(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
			}
		}
	}

	// What no Service holds is leaked.
	pass.Leaked(func(ip netip.Addr, freed bool) {
		if !freed {
			rep(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(),
				Message: fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed on the %s pass that sees it", family, ip, report.Ordinal(repair.LeakPasses))})
			return
		}
		rep(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(), Fixed: !r.cfg.DryRun,
			Message: fmt.Sprintf("Cluster IP [%s]:%s appears to have leaked: cleaning up", family, ip)})
	})

	done, err := pass.Finish(ctx, &found, repair.Reporting{DryRun: r.cfg.DryRun, Observe: r.cfg.Metrics.ObserveProblem, Recorder: r.cfg.Recorder})
	if err != nil {
		return familyOutcome{}, err
	}
	return familyOutcome{problems: done.Problems, allocated: done.Allocated, wrote: done.Wrote}, nil
}

// addrSpace is a ClusterIP range as the repair core's Space: slot i is the
// address network+1+i.
type addrSpace struct{ rng subrange.Range }

func (s addrSpace) Slots() int       { return int(s.rng.Size()) }
func (s addrSpace) StaticSlots() int { return int(s.rng.StaticSize()) }
func (s addrSpace) String() string   { return s.rng.Prefix().String() }

func (s addrSpace) Index(ip netip.Addr) (int, bool) {
	i, ok := s.rng.Index(ip)
	return int(i), ok
}

func (s addrSpace) Key(i int) netip.Addr {
	ip, _ := s.rng.Addr(uint64(i)) // the core asks only for slots of the range
	return ip
}

// holdsIP reports whether svc holds ip.
func holdsIP(svc *corev1.Service, ip netip.Addr) bool {
	return slices.Contains(holding.IPs(svc), ip)
}

func (r *BitmapRepair) servesFamily(ipv6 bool) bool {
	return slices.ContainsFunc(r.cfg.Stores, func(s BitmapStore) bool { return s.Range().IPv6() == ipv6 })
}

func familyName(ipv6 bool) string {
	if ipv6 {
		return string(corev1.IPv6Protocol)
	}
	return string(corev1.IPv4Protocol)
}
