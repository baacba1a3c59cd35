package servicealloc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/subrange"
)

// serviceKind names Services in Invalid errors.
var serviceKind = schema.GroupKind{Kind: "Service"}

// Config configures an Allocator.
type Config struct {
	// Allocators holds one allocator per IP family, in the cluster's family
	// order: the first is the primary family (the default for Services that
	// do not ask for one). One allocator makes a single-stack cluster, two
	// of different families a dual-stack cluster.
	Allocators []allocation.Interface
	// NodePorts allocates the node ports of Services of type NodePort and
	// LoadBalancer (nodePort, healthCheckNodePort). When nil those types are
	// refused with a 422 naming the limit.
	NodePorts nodeport.Interface
	// RetryAfterSeconds is the Retry-After sent with 503 when an allocator
	// is not ready. Zero means 1.
	RetryAfterSeconds int32
	// StartClosed makes the Allocator refuse every reservation of an address
	// or a node port, dry runs included, with allocation.ErrNotReady (503
	// with Retry-After) until Open is called. A server whose allocators lose
	// their state on restart opens it once it has re-marked the stored
	// Services' addresses, so none is handed out twice meanwhile. Releases
	// are never refused.
	StartClosed bool
}

// Allocator defaults, validates, reserves and releases the cluster IPs of
// Services. It is safe for concurrent use.
type Allocator struct {
	families   []corev1.IPFamily
	byFamily   map[corev1.IPFamily]allocation.Interface
	nodePorts  nodeport.Interface // nil: NodePort and LoadBalancer are refused
	retryAfter int32
	closed     atomic.Bool // reservations refused until Open (Config.StartClosed)
	writes     writes      // Service writes in progress, for Drain
}

// New checks cfg and returns an Allocator.
func New(cfg Config) (*Allocator, error) {
	if n := len(cfg.Allocators); n < 1 || n > 2 {
		return nil, fmt.Errorf("servicealloc: need one allocator per family, one or two, got %d", n)
	}
	a := &Allocator{
		byFamily:   map[corev1.IPFamily]allocation.Interface{},
		nodePorts:  cfg.NodePorts,
		retryAfter: cfg.RetryAfterSeconds,
	}
	if a.retryAfter <= 0 {
		a.retryAfter = 1
	}
	a.closed.Store(cfg.StartClosed)
	for i, alloc := range cfg.Allocators {
		if alloc == nil {
			return nil, fmt.Errorf("servicealloc: allocator %d is nil", i)
		}
		fam := corev1.IPv4Protocol
		if alloc.IPv6() {
			fam = corev1.IPv6Protocol
		}
		if _, dup := a.byFamily[fam]; dup {
			return nil, fmt.Errorf("servicealloc: two allocators for %s", fam)
		}
		a.byFamily[fam] = alloc
		a.families = append(a.families, fam)
	}
	return a, nil
}

// Families returns the cluster's IP families, primary first.
func (a *Allocator) Families() []corev1.IPFamily {
	return append([]corev1.IPFamily(nil), a.families...)
}

// DualStack reports whether the cluster serves two IP families.
func (a *Allocator) DualStack() bool { return len(a.families) == 2 }

// NeedsClusterIP reports whether svc gets cluster IPs allocated: every type but
// ExternalName, unless headless.
func NeedsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

// Transaction is the result of reserving addresses for a create or an update.
// Exactly one of Commit (the Service was stored) or Revert (it was not) must
// be called; both are idempotent and the second call does nothing.
type Transaction struct {
	a         *Allocator
	owner     allocation.Owner
	reserved  []netip.Addr // released by Revert
	toRelease []netip.Addr // released by Commit
	ports     portTxn
	done      bool
	// probe marks the dry run PrepareCreate/PrepareUpdate make of a real
	// request that failed validation, to answer with the error the real
	// allocation would give (upstream allocates before it validates).
	probe bool
}

// Commit finishes a successful operation: addresses the update dropped are
// released. Release failures are logged, not returned: the operation has
// already succeeded, and repair frees what is left behind.
func (t *Transaction) Commit(ctx context.Context) {
	if t == nil || t.done {
		return
	}
	t.done = true
	t.a.release(ctx, t.owner, t.toRelease)
	t.a.releasePorts(ctx, t.owner, t.ports.toRelease)
}

// Revert undoes a failed operation: addresses it reserved are released.
func (t *Transaction) Revert(ctx context.Context) {
	if t == nil || t.done {
		return
	}
	t.done = true
	t.a.release(ctx, t.owner, t.reserved)
	t.a.releasePorts(ctx, t.owner, t.ports.reserved)
}

// Reserved returns the addresses the transaction reserved.
func (t *Transaction) Reserved() []netip.Addr { return append([]netip.Addr(nil), t.reserved...) }

// ReservedPorts returns the node ports the transaction reserved.
func (t *Transaction) ReservedPorts() []int { return append([]int(nil), t.ports.reserved...) }

// release frees addrs for owner on a context detached from ctx: the values
// and logger of ctx are kept, its cancellation and deadline are not, and the
// releases get releaseTimeout of their own. A release is the last step of a
// request that has already decided its outcome (a failed create, a stored
// update, a delete); on the request's context every cancelled or timed-out
// request would leak what it reserved, because the bitmap queue refuses a
// dead context at once.
func (a *Allocator) release(ctx context.Context, owner allocation.Owner, addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for _, addr := range addrs {
		alloc := a.byFamily[corev1.IPFamily(subrange.FamilyName(addr.Is6()))]
		if alloc == nil {
			continue
		}
		if err := retryRelease(ctx, func(ctx context.Context) error { return alloc.Release(ctx, addr, owner) }); err != nil {
			klog.FromContext(ctx).Error(err, "Releasing a cluster IP failed; repair will free it", "ip", addr, "service", owner)
		}
	}
}

// ownerOf is the owner of a Service's new allocations: scoped, so that
// ServiceCIDR scopes route them (design.md §11), except the API server's
// own default/kubernetes, whose address is the first of the default range
// whatever scope takes in its namespace.
func ownerOf(svc *corev1.Service) allocation.Owner {
	owner := allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)}
	if svc.Namespace != metav1.NamespaceDefault || svc.Name != kubernetesServiceName {
		owner.Scoped = &allocation.ScopedRequest{Labels: svc.Labels}
	}
	return owner
}

// kubernetesServiceName is the API server's own Service, in namespace default.
const kubernetesServiceName = "kubernetes"

// PrepareCreate normalizes, defaults and validates svc for a create, changing
// it in place. It reserves nothing. Errors are API status errors (422).
//
// kube-apiserver reserves addresses and ports before it validates the
// Service, so when a request is both invalid and asks for something it
// cannot have, its answer is the allocation error. We validate first, so
// that nothing is ever reserved for an invalid Service, and give the same
// answer: an invalid Service is tried against the allocators' dry-run
// views, and a refusal from them is returned instead of the validation
// causes.
func (a *Allocator) PrepareCreate(ctx context.Context, svc *corev1.Service) error {
	normalizeClusterIPs(svc, nil)
	defaultNodePortFields(svc)
	if errs := a.initIPFamilies(svc, nil); len(errs) > 0 {
		return apierrors.NewInvalid(serviceKind, svc.Name, errs)
	}
	if errs := a.validate(svc, nil); len(errs) > 0 {
		if _, err := a.allocateCreate(ctx, &Transaction{a: a, owner: ownerOf(svc), probe: true}, svc.DeepCopy(), true); err != nil {
			return err
		}
		return apierrors.NewInvalid(serviceKind, svc.Name, errs)
	}
	return nil
}

// PrepareUpdate is PrepareCreate for an update from old to svc. Before the
// checks, it keeps the allocated values the client left out and drops the
// fields the new type cannot have (see defaults.go).
func (a *Allocator) PrepareUpdate(ctx context.Context, svc, old *corev1.Service) error {
	patchAllocatedValues(svc, old)
	normalizeClusterIPs(svc, old)
	defaultNodePortFields(svc)
	if errs := a.initIPFamilies(svc, old); len(errs) > 0 {
		return apierrors.NewInvalid(serviceKind, svc.Name, errs)
	}
	dropTypeDependentFields(svc, old)
	if errs := a.validate(svc, old); len(errs) > 0 {
		if _, err := a.allocateUpdate(ctx, &Transaction{a: a, owner: ownerOf(svc), probe: true}, svc.DeepCopy(), old, true); err != nil {
			return err
		}
		return apierrors.NewInvalid(serviceKind, svc.Name, errs)
	}
	return nil
}

func (a *Allocator) validate(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = ValidateService(svc)
	} else {
		// Metadata is left to the strategy: the store fills in system
		// fields (uid, creationTimestamp) a client may omit only after
		// this hook.
		errs = append(validateSpecUpdate(svc, old), validateService(svc, old)...)
	}
	if a.nodePorts == nil && (svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
		errs = append(errs, field.Invalid(typePath, svc.Spec.Type,
			"this server allocates cluster IPs only and does not allocate node ports: "+
				"type NodePort and LoadBalancer are not supported, use ClusterIP"))
	}
	return errs
}

// AllocateCreate reserves the cluster IPs of a Service being created. svc
// must have been through PrepareCreate. It fills spec.clusterIP(s) with the
// reserved addresses. With dryRun the allocators are asked through their
// dry-run views: conflicts are reported, nothing is reserved, and the
// returned transaction releases nothing.
func (a *Allocator) AllocateCreate(ctx context.Context, svc *corev1.Service, dryRun bool) (*Transaction, error) {
	return a.allocateCreate(ctx, &Transaction{a: a, owner: ownerOf(svc)}, svc, dryRun)
}

func (a *Allocator) allocateCreate(ctx context.Context, txn *Transaction, svc *corev1.Service, dryRun bool) (*Transaction, error) {
	if err := a.allocateClusterIPsCreate(ctx, txn, svc, dryRun); err != nil {
		return nil, err
	}
	if err := a.allocateNodePortsCreate(ctx, txn, svc, dryRun); err != nil {
		if !dryRun {
			txn.Revert(ctx)
		}
		return nil, err
	}
	return txn, nil
}

func (a *Allocator) allocateClusterIPsCreate(ctx context.Context, txn *Transaction, svc *corev1.Service, dryRun bool) error {
	if !NeedsClusterIP(svc) {
		return nil
	}
	ips, err := a.allocateFamilies(ctx, txn, svc, svc.Spec.IPFamilies, svc.Spec.ClusterIPs, 0, dryRun)
	if err != nil {
		return err
	}
	svc.Spec.ClusterIPs = ips
	svc.Spec.ClusterIP = ips[0]
	return nil
}

// allocateFamilies reserves one address per family of families[from:]. A
// requested address at the same index of requested is reserved as is; a
// missing one is picked. On error everything reserved by this call is
// released. It returns requested extended with the picked addresses.
func (a *Allocator) allocateFamilies(ctx context.Context, txn *Transaction, svc *corev1.Service,
	families []corev1.IPFamily, requested []string, from int, dryRun bool) ([]string, error) {
	out := append([]string(nil), requested...)
	start := len(txn.reserved)
	fail := func(err error) ([]string, error) {
		if !dryRun {
			a.release(ctx, txn.owner, txn.reserved[start:])
		}
		txn.reserved = txn.reserved[:start]
		return nil, err
	}
	for i := from; i < len(families); i++ {
		alloc := a.byFamily[families[i]]
		if alloc == nil {
			return fail(apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{
				field.Invalid(ipFamiliesPath.Index(i), families[i], "not configured on this cluster")}))
		}
		if err := a.admitReservation(); err != nil {
			return fail(a.notReady(err))
		}
		if dryRun {
			alloc = alloc.DryRun()
		}
		if i < len(out) && out[i] != "" {
			addr, err := netip.ParseAddr(out[i])
			if err != nil {
				return fail(apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{
					field.Invalid(clusterIPsPath.Index(i), out[i], "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")}))
			}
			if err := alloc.Allocate(ctx, addr, txn.owner); err != nil {
				return fail(a.staticError(svc, len(families), addr, err, dryRun && !txn.probe))
			}
			if !dryRun {
				txn.reserved = append(txn.reserved, addr)
			}
			continue
		}
		addr, err := alloc.AllocateNext(ctx, txn.owner)
		if err != nil {
			return fail(a.dynamicError(ctx, err))
		}
		if !dryRun {
			txn.reserved = append(txn.reserved, addr)
		}
		if i < len(out) {
			out[i] = addr.String()
		} else {
			out = append(out, addr.String())
		}
	}
	return out, nil
}

// staticError maps an error of allocating a requested address to the API
// error upstream returns (422 on spec.clusterIPs), except for conditions
// that are not the user's fault. Upstream (IPAddress model only, since
// 1.33) says an address no served range holds, the network and broadcast
// addresses among them, "does not match the current range"; its dry run
// asks one range's allocator, which says "not in the valid range". Both
// models answer the same.
//
// The value shown is spec.clusterIPs with an empty marker for each family
// still to be picked, as upstream shows it (["10.200.0.5",""]).
func (a *Allocator) staticError(svc *corev1.Service, families int, addr netip.Addr, err error, userDryRun bool) error {
	shown := slices.Clone(svc.Spec.ClusterIPs)
	for len(shown) < families {
		shown = append(shown, "")
	}
	switch {
	case errors.Is(err, allocation.ErrNotReady):
		return a.notReady(err)
	case errors.Is(err, allocation.ErrNotInRange), errors.Is(err, allocation.ErrMismatchedNetwork):
		if !userDryRun {
			err = allocation.ErrMismatchedNetwork
		}
		fallthrough
	case errors.Is(err, allocation.ErrAllocated), errors.As(err, new(*allocation.OutOfScopeError)),
		errors.As(err, new(*allocation.DrainingError)):
		return apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{
			field.Invalid(clusterIPsPath, shown,
				fmt.Sprintf("failed to allocate IP %s: %v", addr, err))})
	default:
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate IP %s: %w", addr, err))
	}
}

// dynamicError maps an error of picking a free address to upstream's 500
// "failed to allocate a serviceIP: ...", or 503 when the allocator is not
// ready. The allocator's hint for a full range (allocation.Hint) goes to
// the client as a warning: the error itself stays kube-apiserver's text.
func (a *Allocator) dynamicError(ctx context.Context, err error) error {
	if errors.Is(err, allocation.ErrNotReady) {
		return a.notReady(err)
	}
	if hint := allocation.Hint(err); hint != "" {
		warning.AddWarning(ctx, "", hint)
	}
	return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: %w", err))
}

func (a *Allocator) notReady(err error) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    503,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("failed to allocate a serviceIP: %v", err),
		Details: &metav1.StatusDetails{RetryAfterSeconds: a.retryAfter},
	}}
}

// AllocateUpdate reserves what an update from old to svc needs: all of it
// when the Service starts needing cluster IPs (from ExternalName), the
// secondary family when it becomes dual-stack. Addresses the update drops
// (type ExternalName, dual- to single-stack) are released by Commit. svc must
// have been through PrepareUpdate.
func (a *Allocator) AllocateUpdate(ctx context.Context, svc, old *corev1.Service, dryRun bool) (*Transaction, error) {
	return a.allocateUpdate(ctx, &Transaction{a: a, owner: ownerOf(svc)}, svc, old, dryRun)
}

func (a *Allocator) allocateUpdate(ctx context.Context, txn *Transaction, svc, old *corev1.Service, dryRun bool) (*Transaction, error) {
	if err := a.allocateClusterIPsUpdate(ctx, txn, svc, old, dryRun); err != nil {
		return nil, err
	}
	if err := a.allocateNodePortsUpdate(ctx, txn, svc, old, dryRun); err != nil {
		if !dryRun {
			txn.Revert(ctx)
		}
		return nil, err
	}
	return txn, nil
}

func (a *Allocator) allocateClusterIPsUpdate(ctx context.Context, txn *Transaction, svc, old *corev1.Service, dryRun bool) error {
	oldIPs := holding.IPs(old)
	switch {
	case !NeedsClusterIP(svc):
		if !dryRun {
			txn.toRelease = oldIPs
		}
		return nil
	case !NeedsClusterIP(old):
		return a.allocateClusterIPsCreate(ctx, txn, svc, dryRun)
	}
	// Both have cluster IPs: the primary is immutable (validated), so only
	// the secondary can appear or disappear.
	switch {
	case len(svc.Spec.IPFamilies) > len(oldIPs):
		ips, err := a.allocateFamilies(ctx, txn, svc, svc.Spec.IPFamilies, svc.Spec.ClusterIPs, len(oldIPs), dryRun)
		if err != nil {
			return err
		}
		svc.Spec.ClusterIPs = ips
		svc.Spec.ClusterIP = ips[0]
	case len(svc.Spec.IPFamilies) < len(oldIPs):
		svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:len(svc.Spec.IPFamilies)]
		if !dryRun {
			txn.toRelease = oldIPs[len(svc.Spec.IPFamilies):]
		}
	}
	return nil
}

// Release frees every cluster IP and node port of svc; it is what a delete
// calls once the Service is gone. Failures are logged: repair frees what is
// left behind.
func (a *Allocator) Release(ctx context.Context, svc *corev1.Service) {
	a.release(ctx, ownerOf(svc), holding.IPs(svc))
	a.releasePorts(ctx, ownerOf(svc), holding.NodePorts(svc))
}
