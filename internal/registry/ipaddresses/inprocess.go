package ipaddresses

import (
	"context"
	"errors"
	"fmt"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// upstreamManager and upstreamFields are the field ownership kube-apiserver
// records on the IPAddresses its allocator creates (manager kube-apiserver,
// operation Update, as in testdata's 1.36 capture): an IPAddress written in
// process carries the same, so objects and server-side apply behave alike
// whichever server made them.
const (
	upstreamManager = "kube-apiserver"
	upstreamFields  = `{"f:metadata":{"f:labels":{".":{},"f:ipaddress.kubernetes.io/ip-family":{},"f:ipaddress.kubernetes.io/managed-by":{}}},"f:spec":{"f:parentRef":{".":{},"f:name":{},"f:namespace":{},"f:resource":{}}}}`
)

// InProcess is the IPAddress storage as the server's own allocator uses it:
// the store's create, get and delete called in process (the same strategy,
// validation and etcd write as an API request), without a loopback request
// (authentication, encoding, HTTP, admission). Watches still see every
// change. It satisfies pkg/ipaddress.Objects.
//
// A claim runs under the Service request's fence (internal/fence), as the
// Service's own write does: a create whose answer was lost is made known
// before Create returns (CreateOutcome), so a claim never fails while its
// IPAddress may still be stored later. Deletes are releases, which must
// work after the request's fence was closed: they are never fenced.
type InProcess struct {
	r       *REST
	outcome CreateOutcome
}

// CreateOutcome tells whether the request's create of the IPAddress name,
// whose answer was lost, was applied and the IPAddress is still the one it
// created (the server's: fence.GuardClaims); from its answer on it can no
// longer be applied. An error says the outcome could not be learned.
type CreateOutcome func(ctx context.Context, name string) (landed bool, err error)

// InProcess returns r as the allocator's Objects. outcome may be nil (no
// fence): a claim whose answer was lost then fails, and an IPAddress stored
// later is a leak the repair frees.
func (r *REST) InProcess(outcome CreateOutcome) InProcess { return InProcess{r: r, outcome: outcome} }

// Get reads an IPAddress.
func (p InProcess) Get(ctx context.Context, name string, opts metav1.GetOptions) (*networkingv1.IPAddress, error) {
	ctx = clusterScoped(ctx)
	obj, err := p.r.Get(ctx, name, &opts)
	if err != nil {
		return nil, err
	}
	return asIPAddress(obj)
}

// Create stores a new IPAddress, with upstream's field ownership when the
// caller set none.
func (p InProcess) Create(ctx context.Context, ip *networkingv1.IPAddress, opts metav1.CreateOptions) (*networkingv1.IPAddress, error) {
	ctx = clusterScoped(ctx)
	ip = ip.DeepCopy()
	if len(ip.ManagedFields) == 0 {
		now := metav1.Now()
		ip.ManagedFields = []metav1.ManagedFieldsEntry{{
			Manager: upstreamManager, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: networkingv1.SchemeGroupVersion.String(), Time: &now,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(upstreamFields),
		}}
	}
	obj, err := p.r.Create(ctx, ip, rest.ValidateAllObjectFunc, &opts)
	if err != nil {
		return p.settleCreate(ctx, ip, err)
	}
	return asIPAddress(obj)
}

// settleTimeout bounds learning the outcome of a create whose answer was
// lost; the request's own context has usually ended by then.
const settleTimeout = 30 * time.Second

// settleCreate makes the outcome of a create of ip that failed with err
// known: an IPAddress that was stored anyway is returned as created (the
// caller holds it and releases it as any claim), otherwise err, marked
// allocation.ErrOutcomeUnknown when the outcome could not be learned (the
// IPAddress may still land: the caller keeps what it reserved for it).
func (p InProcess) settleCreate(ctx context.Context, ip *networkingv1.IPAddress, err error) (*networkingv1.IPAddress, error) {
	var status apierrors.APIStatus
	if p.outcome == nil || (errors.As(err, &status) && status.Status().Code > 0 && status.Status().Code < 500) {
		return nil, err // no fence, or refused by the API: not stored
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	log := klog.FromContext(ctx).WithValues("ipaddress", ip.Name, "err", err)
	landed, oerr := p.outcome(ctx, ip.Name)
	switch {
	case oerr != nil:
		log.Info("An IPAddress create failed and its outcome is unknown; leaving it to the repair", "fenceErr", oerr)
		return nil, fmt.Errorf("%w (%w: %v)", err, allocation.ErrOutcomeUnknown, oerr)
	case !landed:
		return nil, err
	}
	stored, gerr := p.Get(ctx, ip.Name, metav1.GetOptions{})
	if gerr != nil || stored.UID != ip.UID {
		log.Info("An IPAddress create failed after it was applied, and the IPAddress is gone or another one now", "readErr", gerr)
		return nil, err
	}
	log.V(2).Info("An IPAddress create failed after it was applied; the claim holds it")
	return stored, nil
}

// List lists IPAddresses as a LIST request with opts does (label selector,
// resourceVersion; the watch cache serves it the same way), without
// encoding and decoding every object. The items share their contents with
// the cache: the caller only reads them.
func (p InProcess) List(ctx context.Context, opts metav1.ListOptions) (*networkingv1.IPAddressList, error) {
	ctx = clusterScoped(ctx)
	var internal metainternalversion.ListOptions
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, &internal, nil); err != nil {
		return nil, fmt.Errorf("list ipaddresses: %w", err)
	}
	obj, err := p.r.List(ctx, &internal)
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*networkingv1.IPAddressList)
	if !ok {
		return nil, fmt.Errorf("ipaddresses store listed %T", obj)
	}
	return list, nil
}

// Delete deletes an IPAddress, honouring opts' preconditions.
func (p InProcess) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	ctx = fence.Unfenced(clusterScoped(ctx))
	_, _, err := p.r.Delete(ctx, name, rest.ValidateAllObjectFunc, &opts)
	return err
}

// DeleteExact deletes seen, an IPAddress as the caller read it (from an
// informer or a moment ago), only if it is still that object (its UID and
// resourceVersion are the preconditions) and belongs to owner as stored
// (ipaddress.OwnedBy). The store's Delete reads the object from etcd twice
// before its delete transaction. When seen tells owner's Service apart
// (it records the Service's UID, or owner has none), this hands the
// storage seen instead, whose transaction compares the revision and, when
// seen was stale, reads and checks again itself. A copy that records no
// UID (the server's informer keeps none, internal/slim) may be of a newer
// Service of owner's name: the storage then reads the object once and
// judges that, the same version as seen or no delete. An object with
// finalizers or being deleted takes the store's Delete, which handles
// them.
func (p InProcess) DeleteExact(ctx context.Context, seen *networkingv1.IPAddress, owner allocation.Owner) error {
	ctx = fence.Unfenced(clusterScoped(ctx))
	preconditions := metav1.Preconditions{UID: &seen.UID, ResourceVersion: &seen.ResourceVersion}
	if len(seen.Finalizers) > 0 || seen.DeletionTimestamp != nil {
		return p.deleteOwned(ctx, seen.Name, owner, preconditions)
	}
	key, err := p.r.KeyFunc(ctx, seen.Name)
	if err != nil {
		return err
	}
	// A copy: the storage clears and restores the object's resourceVersion
	// while it encodes it, and an informer's object is shared.
	var cached runtime.Object
	if _, recorded := seen.Annotations[ipaddress.AnnotationServiceUID]; recorded || owner.UID == "" {
		cached = seen.DeepCopy()
	}
	out := p.r.NewFunc()
	err = p.r.Storage.Delete(ctx, key, out, &storage.Preconditions{UID: preconditions.UID, ResourceVersion: preconditions.ResourceVersion},
		ownedBy(owner), false, cached, storage.DeleteOptions{})
	return storeerr.InterpretDeleteError(err, p.r.DefaultQualifiedResource, seen.Name)
}

// deleteOwned is the store's Delete of name with preconditions, refused
// unless the object deleted belongs to owner.
func (p InProcess) deleteOwned(ctx context.Context, name string, owner allocation.Owner, preconditions metav1.Preconditions) error {
	_, _, err := p.r.Delete(ctx, name, rest.ValidateObjectFunc(ownedBy(owner)), &metav1.DeleteOptions{Preconditions: &preconditions})
	return err
}

// ownedBy validates a deletion: the object deleted, as stored, must be
// owner's IPAddress.
func ownedBy(owner allocation.Owner) storage.ValidateObjectFunc {
	return func(_ context.Context, obj runtime.Object) error {
		ipa, ok := obj.(*networkingv1.IPAddress)
		if !ok {
			return fmt.Errorf("ipaddresses store holds %T", obj)
		}
		if !ipaddress.OwnedBy(ipa, owner) {
			return apierrors.NewConflict(networkingv1.Resource("ipaddresses"), ipa.Name,
				fmt.Errorf("the IPAddress belongs to %s (uid %q), not to service %s", ipaddress.Parent(ipa), ipa.Annotations[ipaddress.AnnotationServiceUID], owner))
		}
		return nil
	}
}

// clusterScoped gives ctx the request namespace of a cluster-scoped object,
// which the store's create insists on finding. A call made while serving a
// Service request carries that Service's namespace; one made from a
// controller's or a test's context carries none.
func clusterScoped(ctx context.Context) context.Context {
	return genericapirequest.WithNamespace(ctx, metav1.NamespaceNone)
}

func asIPAddress(obj runtime.Object) (*networkingv1.IPAddress, error) {
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return nil, fmt.Errorf("ipaddresses store returned %T", obj)
	}
	return ip, nil
}
