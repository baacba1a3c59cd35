package renumber

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/repair/report"
)

// Defaults of Config.
const (
	DefaultBatch   = 50
	DefaultWorkers = 8
)

// Config is one renumber run.
type Config struct {
	Client kubernetes.Interface
	// From names the draining ServiceCIDR to empty; To, when set, the
	// ServiceCIDR every new address must come from.
	From, To string
	Filter   Filter
	// DryRun lists what would move and changes nothing.
	DryRun bool
	// Batch is how many Services are moved at a time (DefaultBatch when 0);
	// Workers how many of a batch at once (DefaultWorkers when 0).
	Batch, Workers int
	// Journal records each re-create before its delete; required unless
	// DryRun. JournalPath is read in a dry run, to report what a killed run
	// left.
	Journal     *Journal
	JournalPath string
	// RecreateInDoubt re-creates the journal's Services that are gone though
	// the journal cannot tell whose delete removed them (InDoubt).
	RecreateInDoubt bool
	// IgnoreStaticBand moves the Services holding addresses of --from's
	// static band as the others, to any free address. By default such an
	// address keeps its offset in the range it moves to (KeepOffset), or
	// the Service is left where it is.
	IgnoreStaticBand bool
	Progress         report.StartProgress
}

// Outcome is what became of one Service.
type Outcome string

// The outcomes.
const (
	WouldMove Outcome = "would move"
	Moved     Outcome = "moved"
	// Resumed: re-created from the journal of a run that was killed.
	Resumed Outcome = "re-created from the journal"
	Left    Outcome = "left"
	// Changed: re-created (by this run or from the journal), but a node
	// port or a kept address it held was taken while it was gone, so it
	// holds another one; Move.Reason names each change.
	Changed Outcome = "moved, node ports or kept addresses changed"
	// LeftDeleted: journalled by a killed run and deleted by someone else
	// since (Judge); not re-created.
	LeftDeleted Outcome = "deleted by someone else, left deleted"
	// InDoubt: journalled by a killed run whose delete was in flight, and
	// gone: that delete or another client's; left pending in the journal,
	// re-created only with Config.RecreateInDoubt.
	InDoubt Outcome = "deleted, in doubt: not re-created"
	// Pending: deleted by this run or a killed one and not re-created yet;
	// the journal holds it and the next run re-creates it.
	Pending Outcome = "deleted, not re-created"
)

// Move is one Service of the run.
type Move struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	OldIPs    []string `json:"oldClusterIPs"`
	NewIPs    []string `json:"newClusterIPs,omitempty"`
	Outcome   Outcome  `json:"outcome"`
	Reason    string   `json:"reason,omitempty"`
	// Offsets are its static-band addresses that keep their offset: the
	// ones it would ask for in a dry run, the ones it holds after a move.
	Offsets []Offset `json:"keptOffsets,omitempty"`
}

// Key is namespace/name.
func (m Move) Key() string { return m.Namespace + "/" + m.Name }

// Result is what a run did.
type Result struct {
	From      string   `json:"from"`
	FromCIDRs []string `json:"fromCIDRs"`
	To        string   `json:"to,omitempty"`
	DryRun    bool     `json:"dryRun"`
	Moves     []Move   `json:"services"`
	// Outside counts the Services in the range that the filter leaves out.
	Outside int `json:"outsideSelection"`
	// Verified: the final verification ran and found nothing (Problems).
	Verified bool          `json:"verified"`
	Problems []string      `json:"problems"`
	Duration time.Duration `json:"-"`
}

// Count returns how many moves have outcome o.
func (r *Result) Count(o Outcome) int {
	n := 0
	for _, m := range r.Moves {
		if m.Outcome == o {
			n++
		}
	}
	return n
}

// ErrNotDraining is returned when --from is not draining.
var ErrNotDraining = errors.New("not draining")

// ErrNoIPAddresses is returned when the Services in the range hold no
// IPAddress: the cluster allocates in the bitmap model, which serves
// --service-cluster-ip-range only and ignores draining.
var ErrNoIPAddresses = errors.New("the Services in the range hold no IPAddress objects: the cluster allocates ClusterIPs in the bitmap model, and renumber needs the IPAddress model")

type runner struct {
	cfg      Config
	client   kubernetes.Interface
	prefixes []netip.Prefix
	picker   *Picker
	// holders names who holds each address with an IPAddress, as listed
	// before the moves ("Service ns/name"); written by plan only.
	holders map[netip.Addr]string
	res     *Result
	mu      sync.Mutex // guards res.Moves and recs
	recs    map[string]*corev1.Service

	openMu sync.Mutex     // guards open
	open   []netip.Prefix // the open ServiceCIDRs' CIDRs, once listed
}

// Run lists the Services holding addresses in cfg.From and, unless
// cfg.DryRun, re-creates them outside it, batch by batch, after re-creating
// what the journal holds; then it verifies. The Result is returned with
// the error too, saying how far it got.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if !cfg.DryRun && cfg.Journal == nil {
		return nil, errors.New("renumber needs a journal unless it is a dry run")
	}
	r := &runner{cfg: cfg, client: cfg.Client, recs: map[string]*corev1.Service{},
		res: &Result{From: cfg.From, To: cfg.To, DryRun: cfg.DryRun, Moves: []Move{}, Problems: []string{}}}
	defer func() {
		r.res.Duration = time.Since(start)
		slices.SortStableFunc(r.res.Moves, func(a, b Move) int { return strings.Compare(a.Key(), b.Key()) })
	}()
	from, err := r.readFrom(ctx)
	if err != nil {
		return nil, err
	}
	r.res.FromCIDRs = from.Spec.CIDRs
	if err := r.resume(ctx); err != nil {
		return r.res, err
	}
	movable, err := r.plan(ctx)
	if err != nil {
		return r.res, err
	}
	if cfg.DryRun {
		r.check(ctx, movable)
		return r.res, ctx.Err()
	}
	if err := r.moveAll(ctx, movable); err != nil {
		return r.res, err
	}
	return r.res, r.verify(ctx)
}

// readFrom reads --from (which must drain) and --to (which must not).
func (r *runner) readFrom(ctx context.Context) (*networkingv1.ServiceCIDR, error) {
	api := r.client.NetworkingV1().ServiceCIDRs()
	from, err := api.Get(ctx, r.cfg.From, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--from: get ServiceCIDR %s: %w", r.cfg.From, err)
	}
	if mode, _ := lifecycle.Parse(from.Annotations); mode != lifecycle.Draining {
		return nil, fmt.Errorf("--from: ServiceCIDR %s is %w: set %s=true first (kubectl annotate servicecidr %s %s=true), so no new Service takes its addresses while it empties",
			from.Name, ErrNotDraining, lifecycle.DrainingAnnotation, from.Name, lifecycle.DrainingAnnotation)
	}
	for _, text := range from.Spec.CIDRs {
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return nil, fmt.Errorf("--from: ServiceCIDR %s: %w", from.Name, err)
		}
		r.prefixes = append(r.prefixes, p)
	}
	if r.cfg.To == "" {
		return from, nil
	}
	if r.cfg.To == r.cfg.From {
		return nil, fmt.Errorf("--to %s: the same ServiceCIDR as --from", r.cfg.To)
	}
	to, err := api.Get(ctx, r.cfg.To, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--to: get ServiceCIDR %s: %w", r.cfg.To, err)
	}
	if mode, _ := lifecycle.Parse(to.Annotations); mode == lifecycle.Draining {
		return nil, fmt.Errorf("--to: ServiceCIDR %s is draining and takes no new address", to.Name)
	}
	if to.DeletionTimestamp != nil {
		return nil, fmt.Errorf("--to: ServiceCIDR %s is being deleted and takes no new address", to.Name)
	}
	r.res.To = to.Name
	r.picker, err = NewPicker(to.Spec.CIDRs, nil)
	return from, err
}

// listServices lists every Service, a page at a time.
func (r *runner) listServices(ctx context.Context) ([]corev1.Service, error) {
	var out []corev1.Service
	opts := metav1.ListOptions{Limit: 500}
	for page := 0; page < 100000; page++ {
		list, err := r.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list Services: %w", err)
		}
		out = append(out, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
	return nil, errors.New("list Services: too many pages")
}

// listIPAddresses returns every IPAddress by name.
func (r *runner) listIPAddresses(ctx context.Context) (map[string]networkingv1.IPAddress, error) {
	out := map[string]networkingv1.IPAddress{}
	opts := metav1.ListOptions{Limit: 1000}
	for page := 0; page < 100000; page++ {
		list, err := r.client.NetworkingV1().IPAddresses().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list IPAddresses: %w", err)
		}
		for _, a := range list.Items {
			out[a.Name] = a
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
	return nil, errors.New("list IPAddresses: too many pages")
}

// plan lists the Services in the range and returns the ones to move; the
// others are recorded as left or outside.
func (r *runner) plan(ctx context.Context) ([]Candidate, error) {
	services, err := r.listServices(ctx)
	if err != nil {
		return nil, err
	}
	addrs, err := r.listIPAddresses(ctx)
	if err != nil {
		return nil, err
	}
	candidates := Select(services, r.prefixes)
	if err := checkIPAddressModel(candidates, addrs); err != nil {
		return nil, err
	}
	r.holders = holders(addrs)
	if r.picker != nil {
		for ip := range r.holders {
			r.picker.Taken(ip)
		}
	}
	var movable []Candidate
	for _, c := range candidates {
		if !r.cfg.Filter.Matches(c.Service) {
			r.res.Outside++
			continue
		}
		m := Move{Namespace: c.Service.Namespace, Name: c.Service.Name, OldIPs: ipStrings(holding.IPs(c.Service))}
		if reason := Refusal(c.Service); reason != "" {
			m.Outcome, m.Reason = Left, reason
			r.res.Moves = append(r.res.Moves, m)
			continue
		}
		movable = append(movable, c)
	}
	r.reserveOffsets(movable)
	return movable, nil
}

// holders names the holder of each address of addrs.
func holders(addrs map[string]networkingv1.IPAddress) map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(addrs))
	for name, a := range addrs {
		ip, err := netip.ParseAddr(name)
		if err != nil {
			continue
		}
		out[ip] = "IPAddress " + name + " (no Service parent)"
		if ref := a.Spec.ParentRef; ipaddress.ParentIsService(&a) {
			out[ip] = "Service " + ref.Namespace + "/" + ref.Name
		}
	}
	return out
}

// checkIPAddressModel refuses a cluster whose Services in the range have
// no IPAddress at all: it allocates in the bitmap model.
func checkIPAddressModel(candidates []Candidate, addrs map[string]networkingv1.IPAddress) error {
	for _, c := range candidates {
		for _, ip := range c.Moved {
			if _, ok := addrs[ip.String()]; ok {
				return nil
			}
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return ErrNoIPAddresses
}

func ipStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// check is the dry run's look at the candidates: each re-create is planned
// and checked by the server's dry run as a real run would, and recorded as
// WouldMove (with the --to addresses it would ask for) or Left.
func (r *runner) check(ctx context.Context, candidates []Candidate) {
	r.parallel(ctx, len(candidates), func(i int) {
		c := candidates[i]
		p, err := r.planMove(ctx, c)
		if err != nil {
			r.record(leftMove(c, err.Error()), nil)
			return
		}
		m := Move{Namespace: c.Service.Namespace, Name: c.Service.Name, OldIPs: ipStrings(holding.IPs(c.Service)), Outcome: WouldMove,
			Offsets: p.offsets}
		if r.picker != nil || len(p.offsets) > 0 {
			m.NewIPs = p.rec.Spec.ClusterIPs
		}
		r.record(m, nil)
	})
}

// moveAll moves the candidates a batch at a time; an interrupt stops it
// between two Services.
func (r *runner) moveAll(ctx context.Context, movable []Candidate) error {
	prog := r.cfg.Progress.Start("Services", len(movable))
	defer prog.Stop()
	for start := 0; start < len(movable); start += r.cfg.Batch {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := movable[start:min(start+r.cfg.Batch, len(movable))]
		if err := r.moveBatch(ctx, batch, prog); err != nil {
			return err
		}
	}
	return nil
}

// record adds a Move to the result.
func (r *runner) record(m Move, rec *corev1.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Moves = append(r.res.Moves, m)
	if rec != nil {
		r.recs[m.Key()] = rec
	}
}

// parallel runs fn on each of n items with the configured workers and
// stops starting new ones once ctx ends.
func (r *runner) parallel(ctx context.Context, n int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.cfg.Workers, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// isGone reports whether err says the object does not exist.
func isGone(err error) bool { return apierrors.IsNotFound(err) }
