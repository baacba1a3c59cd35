package iprepair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// Migration directions.
const (
	ToIPAddress = "bitmap-to-ipaddress"
	ToBitmap    = "ipaddress-to-bitmap"
)

// MigrateConfig configures a migration between the two models.
type MigrateConfig struct {
	// Client reads Services, IPAddresses and ServiceCIDRs and creates IPAddresses.
	Client kubernetes.Interface
	// Stores are the bitmap maps, primary family first (ToBitmap only).
	Stores []BitmapStore
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Workers is how many IPAddress creates run at once (default 16).
	Workers int
	// Progress reports the run (internal/progress on the CLI); nil reports
	// nothing.
	Progress report.StartProgress
	// SkipUnrepresentable (ToBitmap) writes what the bitmap can hold even when
	// some addresses cannot be represented; they are still reported. A server
	// switching models at start uses it: refusing would leave it unable to
	// start over one bad Service, while the bitmap repair reports it anyway.
	SkipUnrepresentable bool
	// Snapshot (ToIPAddress) is where the Services and IPAddresses are read
	// from; nil lists them through Client. See InformerSnapshot.
	Snapshot Snapshot
}

func (cfg MigrateConfig) snapshot() Snapshot {
	if cfg.Snapshot != nil {
		return cfg.Snapshot
	}
	return apiSnapshot{client: cfg.Client}
}

// MigrationReport is the outcome of a migration.
type MigrationReport struct {
	Direction string `json:"direction"`
	DryRun    bool   `json:"dryRun"`
	// Services is the number of Services examined.
	Services int `json:"services"`
	// Addresses is the number of addresses the target model holds for them.
	Addresses int `json:"addresses"`
	// Created is how many IPAddresses were created (or bits set) by this run;
	// in a dry run, how many would be.
	Created int `json:"created"`
	// Present is how many were already there (a rerun after a crash finds
	// the earlier run's work here).
	Present int `json:"present"`
	// Problems are what the migration could not carry over.
	Problems []report.Problem `json:"problems"`
	// Verified is true when a final read found both views in agreement.
	Verified bool          `json:"verified"`
	Duration time.Duration `json:"duration"`
}

// Unresolved counts the problems left.
func (r *MigrationReport) Unresolved() int { return len(r.Problems) }

// Interrupted says how far a migration that stopped early got, and why
// stopping there is safe. r may be nil: it stopped before it reported.
func (r *MigrationReport) Interrupted() string {
	if r == nil || r.Direction == ToBitmap {
		// Each family's map is one compare-and-swap write: written whole or not at all.
		return "the migration stopped before it finished; each bitmap is written whole or not at all, so nothing is half-done."
	}
	verb := "created"
	if r.DryRun {
		verb = "would be created"
	}
	return fmt.Sprintf("%d IPAddresses %s, %d already present, before it stopped; each IPAddress is created whole, so nothing is half-done.", r.Created, verb, r.Present)
}

func (r *MigrationReport) String() string {
	return fmt.Sprintf("%s: %d services, %d addresses (%d created, %d already present), %d problems, verified=%v, %v",
		r.Direction, r.Services, r.Addresses, r.Created, r.Present, len(r.Problems), r.Verified, r.Duration.Round(time.Millisecond))
}

// claim is one Service address to carry over.
type claim struct {
	ip    netip.Addr
	owner allocation.Owner
	// service is the claiming Service, for the order of the creates.
	service *corev1.Service
}

// svc is the claim's Service as report.ServiceKey names it, made only for
// a claim that is reported: a string per claim of a million adds up.
func (c claim) svc() string { return c.owner.Namespace + "/" + c.owner.Name }

// serviceClaims lists every Service address, in the order of services,
// and reports the ones that cannot be addresses at all.
func serviceClaims(services []*corev1.Service) (claims []claim, problems []report.Problem) {
	claims = make([]claim, 0, len(services)) // most Services hold one address
	var ips []netip.Addr                     // one Service's, reused
	for _, svc := range services {
		var invalid []string
		ips, invalid = holding.AppendClusterIPs(ips[:0], svc)
		for _, ip := range ips {
			claims = append(claims, claim{ip: ip, owner: allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)}, service: svc})
		}
		for _, text := range invalid {
			problems = append(problems, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
				Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
		}
	}
	return claims, problems
}

// MigrateToIPAddress carries the bitmap model over to the IPAddress model:
// every Service address inside a ServiceCIDR gets its IPAddress. It is a
// sequence of create-if-absent claims, so it is idempotent, resumes where a
// killed run stopped, and is safe while servers allocate (an address a server
// claimed in between is found present, with its owner checked). It changes
// no owner: an address already claimed by another Service is reported. When
// it stops part-way (ctx cancelled, a create failed) it returns the report so
// far with the error: Created and Present count what was done.
func MigrateToIPAddress(ctx context.Context, cfg MigrateConfig) (*MigrationReport, error) {
	start := time.Now()
	rep := &MigrationReport{Direction: ToIPAddress, DryRun: cfg.DryRun}
	prefixes, err := servedPrefixes(ctx, cfg.Client)
	if err != nil {
		return nil, err
	}
	snap := cfg.snapshot()
	services, err := snap.Services(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rep.Services = len(services)
	claims, problems := serviceClaims(services)
	rep.Problems = problems
	todo := claimsInRange(rep, claims, prefixes)

	// One read finds what earlier runs (or the servers) already claimed, so a
	// rerun costs two lists, and a server's check at every start two reads
	// of its caches, and no write when there is nothing to carry over.
	existing, err := snap.IPAddresses(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	missing := missingClaims(rep, todo, existing)
	// The creates go oldest Service first, so that of two Services holding
	// one address the older is the likelier to get it. Only what is
	// missing is sorted: at a server's start that is usually nothing, and
	// a million Services sorted costs more than the rest of the check.
	slices.SortStableFunc(missing, func(a, b claim) int { return report.OldestFirst(a.service, b.service) })
	if cfg.DryRun {
		rep.Created = len(missing)
		missing = nil
	}

	progress := cfg.Progress.Start("IPAddresses", len(missing))
	defer progress.Stop()
	firstErr := carryOverAll(ctx, cfg, rep, missing, progress)
	rep.Addresses = rep.Created + rep.Present
	// Interrupted (SIGINT) or failed: every claim is one create, whole or
	// not made, so what was created stays valid and a rerun lists it as
	// present. The partial report says how far it got. The context is
	// checked first: creates cut short by the cancellation fail too, and
	// are not the cause.
	if err := ctx.Err(); err != nil {
		rep.Duration = time.Since(start)
		return rep, fmt.Errorf("migrate (resumable: rerun to continue): %w", err)
	}
	if firstErr != nil {
		rep.Duration = time.Since(start)
		return rep, fmt.Errorf("migrate (resumable: rerun to continue): %w", firstErr)
	}
	sortProblems(rep.Problems)

	switch {
	case cfg.DryRun:
	case rep.Created == 0:
		// Nothing written since the read above, which found every claim
		// present or reported it: reading again would find the same.
		rep.Verified = len(rep.Problems) == 0
	default:
		verified, err := verifyIPAddresses(ctx, cfg.Client, todo)
		if err != nil {
			return nil, err
		}
		rep.Verified = verified && len(rep.Problems) == 0
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// servedPrefixes lists the prefixes of the ServiceCIDRs not being deleted;
// it fails when there is none.
func servedPrefixes(ctx context.Context, client kubernetes.Interface) ([]netip.Prefix, error) {
	cidrs, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("migrate: list servicecidrs: %w", err)
	}
	var prefixes []netip.Prefix
	for _, c := range cidrs.Items {
		if c.DeletionTimestamp != nil {
			continue
		}
		for _, text := range c.Spec.CIDRs {
			if p, err := netip.ParsePrefix(text); err == nil {
				prefixes = append(prefixes, p)
			}
		}
	}
	if len(prefixes) == 0 {
		return nil, errors.New("migrate: no ServiceCIDR exists; create one (the server creates \"kubernetes\" from --service-cluster-ip-range)")
	}
	return prefixes, nil
}

// claimsInRange returns the claims whose address lies inside one of
// prefixes, the prefix's own address aside, and reports the others in rep.
// It filters claims in place: the result shares its array.
func claimsInRange(rep *MigrationReport, claims []claim, prefixes []netip.Prefix) []claim {
	entries := make([]prefixindex.Entry[netip.Prefix], len(prefixes))
	for i, p := range prefixes {
		entries[i] = prefixindex.Entry[netip.Prefix]{Prefix: p, Value: p.Masked()}
	}
	index := prefixindex.New(entries) // a lookup per claim, whatever the number of ServiceCIDRs
	var containing []netip.Prefix
	covered := func(ip netip.Addr) bool {
		containing = index.AppendContaining(containing[:0], ip)
		return slices.ContainsFunc(containing, func(p netip.Prefix) bool { return p.Addr() != ip })
	}
	todo := claims[:0]
	for _, c := range claims {
		if !covered(c.ip) {
			rep.Problems = append(rep.Problems, report.Problem{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: c.ip.String(), Service: c.svc(),
				Message: fmt.Sprintf("Cluster IP [%s]:%s is not within any ServiceCIDR; it cannot get an IPAddress", subrange.FamilyName(c.ip.Is6()), c.ip)})
			continue
		}
		todo = append(todo, c)
	}
	return todo
}

// missingClaims returns the claims without an IPAddress in existing (a
// lookup by name). It counts in rep those whose IPAddress is their
// Service's as present, and reports those another parent holds.
func missingClaims(rep *MigrationReport, todo []claim, existing func(name string) *networkingv1.IPAddress) []claim {
	var missing []claim
	for _, c := range todo {
		obj := existing(holding.CanonicalText(c.ip, c.service))
		switch {
		case obj == nil:
			missing = append(missing, c)
		case checkOwner(obj, c) != nil:
			rep.Problems = append(rep.Problems, *checkOwner(obj, c))
		default:
			rep.Present++
		}
	}
	return missing
}

// carryOverAll claims missing with Workers creates at once, adding what it
// created, found present or could not carry over to rep. It stops handing
// out claims at the first error or when ctx ends, and returns that first
// error once every create in flight has returned.
func carryOverAll(ctx context.Context, cfg MigrateConfig, rep *MigrationReport, missing []claim, progress report.Progress) error {
	var (
		mu       sync.Mutex
		created  atomic.Int64
		present  atomic.Int64
		firstErr error
	)
	work := make(chan claim)
	var wg sync.WaitGroup
	workers := cfg.Workers
	if workers <= 0 {
		workers = 16
	}
	for range workers {
		wg.Go(func() {
			for c := range work {
				p, isNew, err := carryOver(ctx, cfg, c)
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case p != nil:
					rep.Problems = append(rep.Problems, *p)
				case isNew:
					created.Add(1)
				default:
					present.Add(1)
				}
				mu.Unlock()
				progress.Add(1)
			}
		})
	}
	for _, c := range missing {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		work <- c
	}
	close(work)
	wg.Wait()
	rep.Created += int(created.Load())
	rep.Present += int(present.Load())
	return firstErr
}

// carryOver claims one address for its Service. It returns a problem when
// another Service holds the address, isNew when it created the object.
func carryOver(ctx context.Context, cfg MigrateConfig, c claim) (*report.Problem, bool, error) {
	api := cfg.Client.NetworkingV1().IPAddresses()
	// The create is the atomic claim: AlreadyExists means a server or another
	// run claimed the address since the list.
	_, err := api.Create(ctx, ipaddress.NewObject(c.ip, c.owner), metav1.CreateOptions{})
	switch {
	case err == nil:
		return nil, true, nil
	case apierrors.IsAlreadyExists(err):
		// Claimed earlier (a previous run, a server): check by whom.
		existing, err := api.Get(ctx, c.ip.String(), metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("get IPAddress %s: %w", c.ip, err)
		}
		return checkOwner(existing, c), false, nil
	case apierrors.IsInvalid(err):
		// The server refuses this address (e.g. a network or broadcast
		// address): a problem of this Service, not a reason to stop.
		return &report.Problem{Type: report.TypeInvalid, IP: c.ip.String(), Service: c.svc(),
			Message: fmt.Sprintf("Cluster IP [%s]:%s of %s cannot get an IPAddress: %v", subrange.FamilyName(c.ip.Is6()), c.ip, c.svc(), err)}, false, nil
	default:
		return nil, false, fmt.Errorf("create IPAddress %s for %s: %w", c.ip, c.svc(), err)
	}
}

func checkOwner(obj *networkingv1.IPAddress, c claim) *report.Problem {
	if references(obj, c.service) {
		return nil
	}
	holder := "nothing"
	if p := obj.Spec.ParentRef; p != nil {
		holder = fmt.Sprintf("%s/%s/%s", p.Resource, p.Namespace, p.Name)
	}
	return &report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: c.ip.String(), Service: c.svc(),
		Message: fmt.Sprintf("Cluster IP [%s]:%s of %s is already claimed by an IPAddress referencing %s", subrange.FamilyName(c.ip.Is6()), c.ip, c.svc(), holder)}
}

// verifyIPAddresses lists the IPAddresses and checks every claim has one
// referencing its Service.
func verifyIPAddresses(ctx context.Context, client kubernetes.Interface, claims []claim) (bool, error) {
	byName, err := listIPAddressObjects(ctx, client)
	if err != nil {
		return false, fmt.Errorf("verify: %w", err)
	}
	for _, c := range claims {
		obj, ok := byName[c.ip.String()]
		if !ok {
			return false, nil
		}
		if !references(obj, c.service) {
			// Reported as a problem already; the views disagree.
			return false, nil
		}
	}
	return true, nil
}

// listIPAddressObjects lists every IPAddress, in pages, by name.
func listIPAddressObjects(ctx context.Context, client kubernetes.Interface) (map[string]*networkingv1.IPAddress, error) {
	list, err := firstIPAddressPage(ctx, client)
	if err != nil {
		return nil, err
	}
	return list.rest(ctx)
}

// ipAddressPages is a paged list of every IPAddress under way. Its first
// page fixes the revision every later page is read at. It keeps each
// IPAddress as internal/slim.IPAddress does, without its managedFields.
type ipAddressPages struct {
	byName map[string]*networkingv1.IPAddress
	pages  *report.Pages[*networkingv1.IPAddress]
}

// firstIPAddressPage reads the first page of a list of every IPAddress.
func firstIPAddressPage(ctx context.Context, client kubernetes.Interface) (*ipAddressPages, error) {
	l := &ipAddressPages{byName: map[string]*networkingv1.IPAddress{}, pages: report.IPAddressPages(client)}
	if err := l.next(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// next reads one page.
func (l *ipAddressPages) next(ctx context.Context) error {
	items, err := l.pages.Next(ctx)
	if err != nil {
		return err
	}
	for _, ipa := range items {
		l.byName[ipa.Name] = ipa
	}
	return nil
}

// rest reads the pages after the first and returns every IPAddress by name.
func (l *ipAddressPages) rest(ctx context.Context) (map[string]*networkingv1.IPAddress, error) {
	for !l.pages.Done() {
		if err := l.next(ctx); err != nil {
			return nil, err
		}
	}
	return l.byName, nil
}

func sortProblems(problems []report.Problem) {
	slices.SortStableFunc(problems, func(a, b report.Problem) int {
		if a.Type != b.Type {
			if a.Type < b.Type {
				return -1
			}
			return 1
		}
		switch {
		case a.IP < b.IP:
			return -1
		case a.IP > b.IP:
			return 1
		}
		return 0
	})
}
