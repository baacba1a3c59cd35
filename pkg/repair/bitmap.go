package repair

import (
	"bytes"
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

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/subrange"
)

// DefaultInterval is how often the periodic repair runs, as upstream.
const DefaultInterval = 3 * time.Minute

// leakPasses is how many consecutive passes must see an address allocated
// with no Service before it is freed. An allocation is written before its
// Service (design.md §7), so one pass can see the bit of a Service that is
// still being created; three passes minutes apart cannot, unless it leaked.
const leakPasses = 3

// maxConflictReruns bounds how often one pass reruns a family whose write
// lost to a concurrent allocation. With the merge below a rerun is rare: it
// happens only when maxMergeAttempts merges in a row lost.
const maxConflictReruns = 10

// maxMergeAttempts bounds how often one family's changes are merged onto a
// freshly read map after losing the compare-and-swap to an allocation.
const maxMergeAttempts = 100

// BitmapStore is what the bitmap repair needs of one family's stored map;
// *bitmap.EtcdAllocator implements it.
type BitmapStore interface {
	Range() subrange.Range
	ReadStored(ctx context.Context) (bitmap.StoredMap, error)
	CompareAndWrite(ctx context.Context, data []byte, revision int64) (int64, error)
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
	// on top of the leakPasses rule: passes run back to back (a rerun, a
	// one-shot job run three times) must not free the address of a Service
	// whose create is merely slow.
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

// leakState tracks one address seen allocated with no Service.
type leakState struct {
	passesLeft int       // passes to go before it may be freed
	firstSeen  time.Time // when a pass first saw it leaked
}

// BitmapRepair rebuilds the bitmap model's RangeAllocations from the Services.
// See the package doc for its rules.
type BitmapRepair struct {
	cfg BitmapConfig
	// leaks counts, per address, the passes left before a leaked address is
	// freed. Only the goroutine running a pass touches it; RunOnce must not
	// be called concurrently.
	leaks map[netip.Addr]leakState
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
	return &BitmapRepair{cfg: cfg, leaks: map[netip.Addr]leakState{}}, nil
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
	pending := slices.Clone(r.cfg.Stores)
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > maxConflictReruns {
			return nil, fmt.Errorf("bitmap repair: gave up after %d writes lost to concurrent allocations", maxConflictReruns)
		}
		// The maps are read before the Services are listed: an address
		// allocated after the read is not in the map, and one allocated
		// before it whose Service is not stored yet looks leaked for one
		// pass only (see leakPasses).
		maps := make([]bitmap.StoredMap, len(pending))
		for i, store := range pending {
			m, err := store.ReadStored(ctx)
			if err != nil {
				return nil, fmt.Errorf("bitmap repair: %w", err)
			}
			maps[i] = m
		}
		services, err := listServices(ctx, r.cfg.Client)
		if err != nil {
			return nil, fmt.Errorf("bitmap repair: %w", err)
		}
		report.Services = len(services)

		var conflicted []BitmapStore
		for i, store := range pending {
			outcome, err := r.repairFamily(ctx, store, maps[i], services)
			if errors.Is(err, bitmap.ErrConflict) {
				conflicted = append(conflicted, store)
				continue
			}
			if err != nil {
				return nil, err
			}
			report.Problems = append(report.Problems, outcome.problems...)
			report.Allocated += outcome.allocated
			if outcome.wrote {
				report.Writes++
			}
		}
		pending = conflicted
	}
	report.Duration = time.Since(start)
	return report, nil
}

type familyOutcome struct {
	problems  []Problem
	allocated int
	wrote     bool
}

// repairFamily rebuilds one family's map from services and writes it back if
// it differs. Leak counters, events and metrics are committed only once the
// write succeeded, so a pass rerun after a conflict counts nothing twice.
func (r *BitmapRepair) repairFamily(ctx context.Context, store BitmapStore, stored bitmap.StoredMap, services []corev1.Service) (familyOutcome, error) {
	rng := store.Range()
	storedAlloc, err := bitmap.NewAllocator(rng)
	if err != nil {
		return familyOutcome{}, err
	}
	if err := storedAlloc.Restore(rng.Prefix().String(), stored.Data); err != nil {
		return familyOutcome{}, fmt.Errorf("bitmap repair: restore stored map of %s: %w", rng.Prefix(), err)
	}
	rebuilt, err := bitmap.NewAllocator(rng)
	if err != nil {
		return familyOutcome{}, err
	}
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
	leaks := map[netip.Addr]leakState{}
	now := r.cfg.Now()
	// The changes this pass makes, merged onto a fresh map if the write
	// loses to a concurrent allocation.
	var toSet, toClear []netip.Addr
	holders := map[netip.Addr]*corev1.Service{} // the Service each toSet address was found on

	for i := range services {
		svc := &services[i]
		for _, text := range serviceIPs(svc) {
			ip, ok := parseServiceIP(text)
			if !ok {
				// Reported once, by the primary family's pass.
				if store == r.cfg.Stores[0] {
					report(svc, Problem{Type: TypeInvalid, Reason: ReasonNotValid, IP: text, Service: key(svc),
						Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
				}
				continue
			}
			if ip.Is6() != rng.IPv6() {
				if !r.servesFamily(ip.Is6()) && store == r.cfg.Stores[0] {
					fam := familyName(ip.Is6())
					report(svc, Problem{Type: TypeInvalid, Reason: ReasonNotValid, IP: text, Service: key(svc),
						Message: fmt.Sprintf("Cluster IP %s(%s) is of ip family that is no longer configured on cluster; please recreate service", text, fam)})
				}
				continue
			}
			err := rebuilt.Allocate(ctx, ip, allocation.Owner{})
			switch {
			case err == nil:
				if has, _ := storedAlloc.Has(ctx, ip); has {
					// Take it out of the stored set: what remains are leaks.
					_ = storedAlloc.Release(ctx, ip, allocation.Owner{})
				} else {
					toSet = append(toSet, ip)
					holders[ip] = svc
					report(svc, Problem{Type: TypeRepair, Reason: ReasonNotAllocated, IP: text, Service: key(svc), Fixed: !r.cfg.DryRun,
						Message: fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", family, text)})
				}
			case errors.Is(err, allocation.ErrAllocated):
				report(svc, Problem{Type: TypeDuplicate, Reason: ReasonAlreadyAllocated, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", family, text)})
			case errors.Is(err, allocation.ErrNotInRange):
				report(svc, Problem{Type: TypeOutOfRange, Reason: ReasonOutOfRange, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Cluster IP [%s]:%s is not within the service CIDR %s; please recreate service", family, text, rng.Prefix())})
			default:
				report(svc, Problem{Type: TypeUnknown, Reason: ReasonUnknown, IP: text, Service: key(svc),
					Message: fmt.Sprintf("Unable to allocate cluster IP [%s]:%s due to an unknown error", family, text)})
			}
		}
	}

	// What is left in the stored set is allocated with no Service.
	_ = storedAlloc.ForEach(ctx, func(ip netip.Addr) {
		state, seen := r.leaks[ip]
		if !seen {
			state = leakState{passesLeft: leakPasses - 1, firstSeen: now}
		}
		if state.passesLeft > 0 || now.Sub(state.firstSeen) < r.cfg.LeakGrace {
			state.passesLeft = max(state.passesLeft-1, 0)
			leaks[ip] = state
			_ = rebuilt.Allocate(ctx, ip, allocation.Owner{}) // keep it for now
			report(nil, Problem{Type: TypeLeak, IP: ip.String(),
				Message: fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed on the %s pass that sees it", family, ip, ordinal(leakPasses))})
			return
		}
		toClear = append(toClear, ip)
		report(nil, Problem{Type: TypeLeak, IP: ip.String(), Fixed: !r.cfg.DryRun,
			Message: fmt.Sprintf("Cluster IP [%s]:%s appears to have leaked: cleaning up", family, ip)})
	})

	_, data := rebuilt.Snapshot()
	outcome := familyOutcome{problems: problems, allocated: rebuilt.Used()}
	if r.cfg.DryRun {
		return outcome, nil
	}
	if !stored.Exists() || !bytes.Equal(data, stored.Data) {
		stillHeld := func(ctx context.Context, slot int) (bool, error) {
			ip, _ := rng.Addr(uint64(slot))
			return r.stillHolds(ctx, holders[ip], ip)
		}
		wrote, notMissingSlot, err := mergeWrite(ctx, store, int(rng.Size()), int(rng.StaticSize()), data, stored,
			slotsOf(rng, toSet), slotsOf(rng, toClear), stillHeld)
		if err != nil {
			return familyOutcome{}, fmt.Errorf("bitmap repair: %s: %w", rng.Prefix(), err)
		}
		notMissing := map[netip.Addr]bool{}
		for slot := range notMissingSlot {
			ip, _ := rng.Addr(uint64(slot))
			notMissing[ip] = true
		}
		outcome.wrote = wrote
		if len(notMissing) > 0 {
			// Their bits were set after the pass's read by the allocation
			// that stored the Service (the bit precedes the Service), or
			// their Service was deleted since the pass listed it: not a
			// fault, so no ClusterIPNotAllocated for them.
			notMissing := func(p Problem) bool {
				ip, err := netip.ParseAddr(p.IP)
				return p.Reason == ReasonNotAllocated && err == nil && notMissing[ip]
			}
			problems = slices.DeleteFunc(problems, notMissing)
			events = slices.DeleteFunc(events, func(e eventFor) bool { return notMissing(e.problem) })
			outcome.problems = problems
		}
	}
	// Committed: forget leaks of this family that are no longer leaked, keep
	// the new counts, and tell the world.
	for ip := range r.leaks {
		if ip.Is6() == rng.IPv6() {
			delete(r.leaks, ip)
		}
	}
	for ip, state := range leaks {
		r.leaks[ip] = state
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

// slotsOf maps addresses of rng to their slots in its map.
func slotsOf(rng subrange.Range, ips []netip.Addr) []int {
	slots := make([]int, 0, len(ips))
	for _, ip := range ips {
		if i, ok := rng.Index(ip); ok {
			slots = append(slots, int(i))
		}
	}
	return slots
}

// stillHolds reports whether svc, read again, still exists with the same
// UID and holds ip.
func (r *BitmapRepair) stillHolds(ctx context.Context, svc *corev1.Service, ip netip.Addr) (bool, error) {
	if svc == nil {
		return true, nil
	}
	cur, err := sameService(ctx, r.cfg.Client, svc)
	if cur == nil || err != nil {
		return false, err
	}
	for _, text := range serviceIPs(cur) {
		if a, ok := parseServiceIP(text); ok && a == ip {
			return true, nil
		}
	}
	return false, nil
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
