package servicealloc

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"
)

// releaseTimeout bounds the releases run from the store's AfterDelete hook,
// which gets no request context.
const releaseTimeout = 30 * time.Second

// REST is a Service storage with cluster IP allocation: a generic registry
// store whose create, update and delete hooks call an Allocator.
//
// Invariants: a request is validated, and a create is checked for an
// existing object, before any address is reserved; a reserved address is
// released when the Service is not stored; addresses an update drops are
// released only once the update is stored; a delete releases the Service's
// addresses once it is gone from storage; dry-run reserves nothing.
type REST struct {
	*genericregistry.Store
	alloc *Allocator
}

// NewREST installs the allocation hooks (BeginCreate, BeginUpdate,
// AfterDelete) into store, which must be a completed store of
// *corev1.Service, and returns the storage to serve. Serve the returned
// REST, not store: its Create and Update add what the hooks cannot do alone.
func NewREST(store *genericregistry.Store, alloc *Allocator) *REST {
	r := &REST{Store: store, alloc: alloc}
	store.BeginCreate = r.beginCreate
	store.BeginUpdate = r.beginUpdate
	store.AfterDelete = r.afterDelete
	return r
}

// Allocator returns the allocator the hooks call.
func (r *REST) Allocator() *Allocator { return r.alloc }

// Create refuses a Service that already exists before anything is reserved,
// then creates it through the store (whose BeginCreate hook reserves).
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Service: %T", obj))
	}
	if svc.Name != "" {
		_, err := r.Store.Get(ctx, svc.Name, &metav1.GetOptions{})
		switch {
		case err == nil:
			return nil, apierrors.NewAlreadyExists(r.Store.DefaultQualifiedResource, svc.Name)
		case !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	return r.Store.Create(ctx, obj, createValidation, options)
}

// Update runs the store's update and then settles the allocations its
// attempts made. The store calls BeginUpdate (or BeginCreate, for a create
// through update or server-side apply) inside its compare-and-swap loop and
// reports success before the write: only the last successful attempt was
// stored, so its transaction is committed and all others are reverted.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	attempts := &attemptLog{}
	out, created, err := r.Store.Update(withAttempts(ctx, attempts), name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	attempts.settle(ctx, err == nil)
	return out, created, err
}

func (r *REST) beginCreate(ctx context.Context, obj runtime.Object, options *metav1.CreateOptions) (genericregistry.FinishFunc, error) {
	svc := obj.(*corev1.Service)
	if err := r.alloc.PrepareCreate(svc); err != nil {
		return nil, err
	}
	txn, err := r.alloc.AllocateCreate(ctx, svc, dryrun.IsDryRun(options.DryRun))
	if err != nil {
		return nil, err
	}
	return finisher(ctx, txn), nil
}

func (r *REST) beginUpdate(ctx context.Context, obj, old runtime.Object, options *metav1.UpdateOptions) (genericregistry.FinishFunc, error) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	if err := r.alloc.PrepareUpdate(svc, oldSvc); err != nil {
		return nil, err
	}
	txn, err := r.alloc.AllocateUpdate(ctx, svc, oldSvc, dryrun.IsDryRun(options.DryRun))
	if err != nil {
		return nil, err
	}
	return finisher(ctx, txn), nil
}

// finisher returns the FinishFunc for txn. Outside Update (a plain create)
// the store calls it after the write, so it settles txn at once. Inside
// Update a success is only provisional and is recorded in the attempt log.
func finisher(ctx context.Context, txn *Transaction) genericregistry.FinishFunc {
	attempts := attemptsFrom(ctx)
	return func(ctx context.Context, success bool) {
		switch {
		case !success:
			txn.Revert(ctx)
		case attempts != nil:
			attempts.add(txn)
		default:
			txn.Commit(ctx)
		}
	}
}

func (r *REST) afterDelete(obj runtime.Object, options *metav1.DeleteOptions) {
	if options != nil && dryrun.IsDryRun(options.DryRun) {
		return
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	r.alloc.Release(ctx, svc)
}

// attemptLog records the transactions of the update attempts that passed.
type attemptLog struct {
	mu   sync.Mutex
	txns []*Transaction // guarded by mu
}

func (l *attemptLog) add(txn *Transaction) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txns = append(l.txns, txn)
}

// settle commits the last attempt when the update was stored and reverts
// every other one.
func (l *attemptLog) settle(ctx context.Context, stored bool) {
	l.mu.Lock()
	txns := l.txns
	l.txns = nil
	l.mu.Unlock()
	for i, txn := range txns {
		if stored && i == len(txns)-1 {
			txn.Commit(ctx)
		} else {
			txn.Revert(ctx)
		}
	}
}

type attemptsKey struct{}

func withAttempts(ctx context.Context, l *attemptLog) context.Context {
	return context.WithValue(ctx, attemptsKey{}, l)
}

func attemptsFrom(ctx context.Context) *attemptLog {
	l, _ := ctx.Value(attemptsKey{}).(*attemptLog)
	return l
}

// Compile-time checks: REST serves what the store serves.
var (
	_ rest.Creater = &REST{}
	_ rest.Updater = &REST{}
)
