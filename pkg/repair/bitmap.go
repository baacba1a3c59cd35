package repair

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/rangerepair"
	"github.com/allocator/allocator/pkg/subrange"
)

// DefaultInterval is how often the periodic repair runs, as upstream.
const DefaultInterval = 3 * time.Minute

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
	Metrics *Metrics
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
	// (pkg/dualwrite), whose repair reports on the Services: addresses
	// outside a map belong to other ServiceCIDRs, and duplicates and missing
	// bits are that repair's to report. The pass still sets missing bits
	// and frees leaks; it reports only what is the map's own.
	Companion bool
}

// RequestTimeout is kube-apiserver's default --request-timeout: the longest
// a Service create can take between reserving its ClusterIP and storing the
// Service. On a real kube-apiserver the address is reserved before the
// validating admission webhooks run, so a create with slow webhooks holds a
// reserved-but-not-stored address for up to this long.
const RequestTimeout = 60 * time.Second

// leakGraceMargin is added to RequestTimeout for the clock skew between the
// replica that reserved and the repair, and for the time between a pass's map
// read and its Service list.
const leakGraceMargin = 30 * time.Second

// DefaultLeakGrace is the default BitmapConfig.LeakGrace, in the server and
// in the one-shot `allocator repair` job alike: longer than any
// reserved-but-not-yet-stored allocation can exist (RequestTimeout plus a
// margin). A shorter grace frees the address of a create that is merely slow
// and hands it out again: two Services with one ClusterIP. The one-shot job
// once defaulted to 10 s and did exactly that (issue 11, defect 2).
const DefaultLeakGrace = RequestTimeout + leakGraceMargin

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
		cfg.Interval = DefaultInterval
	}
	if cfg.LeakGrace <= 0 {
		cfg.LeakGrace = DefaultLeakGrace
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
	runReports(ctx, r.cfg.Interval, "Bitmap repair", r.RunOnce, r.cfg.Metrics.reconcileError, firstPass)
	return nil
}

// RunOnce makes one repair pass over every family.
func (r *BitmapRepair) RunOnce(ctx context.Context) (*Report, error) {
	start := time.Now()
	report := &Report{Model: "bitmap", DryRun: r.cfg.DryRun}
	list := func(ctx context.Context) ([]corev1.Service, error) {
		services, err := listServices(ctx, r.cfg.Client)
		report.Services = len(services)
		return services, err
	}
	err := rangerepair.Run(ctx, r.families, list, func(ctx context.Context, i int, pass *rangerepair.Pass[netip.Addr], services []corev1.Service) error {
		outcome, err := r.repairFamily(ctx, i, pass, services)
		if err != nil {
			return err
		}
		report.Problems = append(report.Problems, outcome.problems...)
		report.Allocated += outcome.allocated
		if outcome.wrote {
			report.Writes++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bitmap repair: %w", err)
	}
	report.Duration = time.Since(start)
	return report, nil
}

type familyOutcome struct {
	problems  []Problem
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
	var problems []Problem
	type eventFor struct {
		svc     *corev1.Service
		problem Problem
	}
	var events []eventFor
	report := func(svc *corev1.Service, p Problem) {
		if r.cfg.Companion && (p.Type == TypeOutOfRange || p.Type == TypeDuplicate || p.Reason == ReasonNotAllocated) {
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
					report(svc, Problem{Type: TypeInvalid, Reason: ReasonNotValid, IP: text, Service: key(svc),
						Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
				}
				continue
			}
			if ip.Is6() != rng.IPv6() {
				if !r.servesFamily(ip.Is6()) && primary {
					fam := familyName(ip.Is6())
					report(svc, Problem{Type: TypeInvalid, Reason: ReasonNotValid, IP: text, Service: key(svc),
						Message: fmt.Sprintf("Cluster IP %s(%s) is of ip family that is no longer configured on cluster; please recreate service", text, fam)})
				}
				continue
			}
			switch pass.Hold(svc, ip) {
			case rangerepair.Held:
			case rangerepair.Missing:
				report(svc, Problem{Type: TypeRepair, Reason: ReasonNotAllocated, IP: text, Service: key(svc), Fixed: !r.cfg.DryRun,
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", family, text)})
			case rangerepair.Duplicate:
				report(svc, Problem{Type: TypeDuplicate, Reason: ReasonAlreadyAllocated, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", family, text)})
			case rangerepair.OutOfRange:
				report(svc, Problem{Type: TypeOutOfRange, Reason: ReasonOutOfRange, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not within the service CIDR %s; please recreate service", family, text, rng.Prefix())})
			}
		}
	}

	// What no Service holds is leaked.
	pass.Leaked(func(ip netip.Addr, freed bool) {
		if !freed {
			report(nil, Problem{Type: TypeLeak, IP: ip.String(),
				Message: fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed on the %s pass that sees it", family, ip, ordinal(rangerepair.LeakPasses))})
			return
		}
		report(nil, Problem{Type: TypeLeak, IP: ip.String(), Fixed: !r.cfg.DryRun,
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
		notMissing := func(p Problem) bool {
			ip, err := netip.ParseAddr(p.IP)
			return p.Reason == ReasonNotAllocated && err == nil && res.NotMissing[ip]
		}
		problems = slices.DeleteFunc(problems, notMissing)
		events = slices.DeleteFunc(events, func(e eventFor) bool { return notMissing(e.problem) })
		outcome.problems = problems
	}
	for _, p := range problems {
		r.cfg.Metrics.problem(p)
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

// listServices lists every Service with a consistent read, in pages, oldest
// first (then by namespace/name), so that of two Services sharing an IP the
// older one keeps it.
func listServices(ctx context.Context, client kubernetes.Interface) ([]corev1.Service, error) {
	var services []corev1.Service
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		services = append(services, list.Items...)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	slices.SortStableFunc(services, func(a, b corev1.Service) int {
		if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(key(&a), key(&b))
	})
	return services, nil
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

func key(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	default:
		return fmt.Sprintf("%dth", n)
	}
}
