package controller

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

	"github.com/allocator/allocator/pkg/allocator/rangerepair"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// BitmapStore is what the bitmap repair needs of one family's stored map;
// *bitmap.EtcdAllocator implements it.
type BitmapStore interface {
	Range() subrange.Range
	rangerepair.Store
}

var _ BitmapStore = (*bitmap.EtcdAllocator)(nil)

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
	// address leaked and the pass that frees it (default DefaultLeakGrace),
	// on top of the rangerepair.LeakPasses rule: passes run back to back (a
	// rerun, a one-shot job run three times) must not free the address of a
	// Service whose create is merely slow.
	LeakGrace time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Companion says the maps are dual-written beside the IPAddress model
	// (pkg/ipallocator/dualwrite), whose repair reports on the Services: addresses
	// outside a map belong to other ServiceCIDRs, and duplicates and missing
	// bits are that repair's to report. The pass still sets missing bits
	// and frees leaks; it reports only what is the map's own.
	Companion bool
}

// BitmapRepair rebuilds the bitmap model's RangeAllocations from the Services,
// one rangerepair.Repairer per family. See the package doc for its rules.
type BitmapRepair struct {
	cfg BitmapConfig
	// families are the repair cores of cfg.Stores, in order; they carry the
	// leak counts from pass to pass, so RunOnce must not be called
	// concurrently.
	families []*rangerepair.Repairer[netip.Addr]
}

// NewBitmapRepair checks cfg and returns a repair controller.
func NewBitmapRepair(cfg BitmapConfig) (*BitmapRepair, error) {
	if cfg.Client == nil || len(cfg.Stores) == 0 {
		return nil, errors.New("bitmap repair: a client and at least one store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = report.DefaultInterval
	}
	if cfg.LeakGrace <= 0 {
		cfg.LeakGrace = rangerepair.DefaultLeakGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &BitmapRepair{cfg: cfg}
	for _, store := range cfg.Stores {
		family, err := rangerepair.New(rangerepair.Config[netip.Addr]{
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
	err := rangerepair.Run(ctx, r.families, list, func(ctx context.Context, i int, pass *rangerepair.Pass[netip.Addr], services []corev1.Service) error {
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
// commits it. Events and metrics follow only a successful commit, so a pass
// rerun after a conflict reports nothing twice.
func (r *BitmapRepair) repairFamily(ctx context.Context, i int, pass *rangerepair.Pass[netip.Addr], services []corev1.Service) (familyOutcome, error) {
	rng := r.cfg.Stores[i].Range()
	primary := i == 0
	family := familyName(rng.IPv6())
	var problems []report.Problem
	type eventFor struct {
		svc     *corev1.Service
		problem report.Problem
	}
	var events []eventFor
	rep := func(svc *corev1.Service, p report.Problem) {
		if r.cfg.Companion && (p.Type == report.TypeOutOfRange || p.Type == report.TypeDuplicate || p.Reason == report.ReasonNotAllocated) {
			return
		}
		problems = append(problems, p)
		if svc != nil && p.Reason != "" {
			events = append(events, eventFor{svc, p})
		}
	}

	for i := range services {
		svc := &services[i]
		for _, text := range serviceIPs(svc) {
			ip, ok := parseServiceIP(text)
			if !ok {
				// Reported once, by the primary family's pass.
				if primary {
					rep(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
						Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
				}
				continue
			}
			if ip.Is6() != rng.IPv6() {
				if !r.servesFamily(ip.Is6()) && primary {
					fam := familyName(ip.Is6())
					rep(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
						Message: fmt.Sprintf("Cluster IP %s(%s) is of ip family that is no longer configured on cluster; please recreate service", text, fam)})
				}
				continue
			}
			switch pass.Hold(svc, ip) {
			case rangerepair.Held:
			case rangerepair.Missing:
				rep(svc, report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: text, Service: report.ServiceKey(svc), Fixed: !r.cfg.DryRun,
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", family, text)})
			case rangerepair.Duplicate:
				rep(svc, report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: text, Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", family, text)})
			case rangerepair.OutOfRange:
				rep(svc, report.Problem{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: text, Service: report.ServiceKey(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not within the service CIDR %s; please recreate service", family, text, rng.Prefix())})
			}
		}
	}

	// What no Service holds is leaked.
	pass.Leaked(func(ip netip.Addr, freed bool) {
		if !freed {
			rep(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(),
				Message: fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed on the %s pass that sees it", family, ip, report.Ordinal(rangerepair.LeakPasses))})
			return
		}
		rep(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(), Fixed: !r.cfg.DryRun,
			Message: fmt.Sprintf("Cluster IP [%s]:%s appears to have leaked: cleaning up", family, ip)})
	})

	outcome := familyOutcome{problems: problems, allocated: pass.Allocated()}
	if r.cfg.DryRun {
		return outcome, nil
	}
	res, err := pass.Commit(ctx)
	if err != nil {
		return familyOutcome{}, err
	}
	outcome.wrote = res.Wrote
	if len(res.NotMissing) > 0 {
		// Their bits were set after the pass's read by the allocation that
		// stored the Service (the bit precedes the Service), or their Service
		// was deleted since the pass listed it: not a fault, so no
		// ClusterIPNotAllocated for them.
		notMissing := func(p report.Problem) bool {
			ip, err := netip.ParseAddr(p.IP)
			return p.Reason == report.ReasonNotAllocated && err == nil && res.NotMissing[ip]
		}
		problems = slices.DeleteFunc(problems, notMissing)
		events = slices.DeleteFunc(events, func(e eventFor) bool { return notMissing(e.problem) })
		outcome.problems = problems
	}
	for _, p := range problems {
		r.cfg.Metrics.ObserveProblem(p)
	}
	if r.cfg.Recorder != nil {
		for _, e := range events {
			r.cfg.Recorder.Event(e.svc, corev1.EventTypeWarning, e.problem.Reason, e.problem.Message)
		}
	}
	return outcome, nil
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
	for _, text := range serviceIPs(svc) {
		if a, ok := parseServiceIP(text); ok && a == ip {
			return true
		}
	}
	return false
}

func (r *BitmapRepair) servesFamily(ipv6 bool) bool {
	return slices.ContainsFunc(r.cfg.Stores, func(s BitmapStore) bool { return s.Range().IPv6() == ipv6 })
}

// serviceIPs returns the ClusterIPs a Service holds (none for headless and
// ExternalName Services).
func serviceIPs(svc *corev1.Service) []string {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			out = append(out, ip)
		}
	}
	return out
}

// parseServiceIP reads a stored ClusterIP as kube-apiserver would: any
// spelling of an address (IPv4-mapped IPv6 is its IPv4 address); zones and
// garbage are invalid.
func parseServiceIP(text string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(text)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

func familyName(ipv6 bool) string {
	if ipv6 {
		return string(corev1.IPv6Protocol)
	}
	return string(corev1.IPv4Protocol)
}
