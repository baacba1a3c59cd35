package servicealloc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// releaseTimeout bounds every release (rollback, settlement of an update,
// delete). Releases run detached from the request's context, which may
// already be cancelled; this is their own bound.
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
	alloc   *Allocator
	deletes *deleteLog
	fencer  Fencer // nil: unknown outcomes are left to the repair
}

// NewREST installs the allocation hooks (BeginCreate, BeginUpdate,
// AfterDelete) and the read defaulting (Decorator) into store, which must be a store of *corev1.Service
// completed with options from TrackDeletes, and returns the storage to
// serve. Serve the returned REST, not store: its Create and Update add what
// the hooks cannot do alone. fencer, if not nil, must fence the writes of
// store's storage (settle.go).
func NewREST(store *genericregistry.Store, alloc *Allocator, fencer Fencer) (*REST, error) {
	tracking, ok := store.Storage.Storage.(*deleteTracking)
	if !ok {
		return nil, fmt.Errorf("servicealloc: the Service store must be completed with servicealloc.TrackDeletes options, its storage is %T", store.Storage.Storage)
	}
	tracking.fencer = fencer
	r := &REST{Store: store, alloc: alloc, deletes: tracking.log, fencer: fencer}
	store.BeginCreate = r.beginCreate
	store.BeginUpdate = r.beginUpdate
	store.AfterDelete = r.afterDelete
	store.Decorator = alloc.DefaultOnRead
	return r, nil
}

// TrackDeletes returns options whose storage records the deletes it performs,
// which NewREST needs (see afterDelete). The store must be completed with
// them: the storage is built, and its statistics goroutine started, during
// completion, so it cannot be swapped afterwards.
func TrackDeletes(getter generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	return trackingOptions{getter}
}

type trackingOptions struct{ generic.RESTOptionsGetter }

func (g trackingOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	if decorate == nil {
		decorate = generic.UndecoratedStorage
	}
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(obj runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		s, destroy, err := decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		if err != nil {
			return nil, nil, err
		}
		return &deleteTracking{Interface: s, log: &deleteLog{objs: map[runtime.Object]struct{}{}}}, destroy, nil
	}
	return opts, nil
}

// Allocator returns the allocator the hooks call.
func (r *REST) Allocator() *Allocator { return r.alloc }

// Create creates a Service through the store (whose BeginCreate hook
// reserves), and settles what was reserved when the write failed.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Service: %T", obj))
	}
	done, err := r.alloc.beginWrite()
	if err != nil {
		return nil, err
	}
	defer done()
	// No existence check first: as in kube-apiserver, a create of a name
	// already taken is validated and allocates before the write answers
	// 409, so asking again for the address or node port the existing
	// Service holds is refused as taken (422), and what a dynamic request
	// picked is released on the 409 (testdata/parity, "already-exists").
	ctx = r.guard(ctx)
	log := &writeLog{}
	out, err := r.Store.Create(withWriteLog(ctx, log), obj, createValidation, options)
	// The store names the Service before it reserves (generateName).
	r.settle(ctx, log, err, svc.Name)
	return out, err
}

// Update runs the store's update and then settles the allocations its
// attempts made (settle.go): the store calls BeginUpdate (or BeginCreate,
// for a create through update or server-side apply) inside its
// compare-and-swap loop and reports success before the write, so only the
// last passed attempt can have been stored.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	done, err := r.alloc.beginWrite()
	if err != nil {
		return nil, false, err
	}
	defer done()
	ctx = r.guard(ctx)
	log := &writeLog{update: true}
	out, created, err := r.Store.Update(withWriteLog(ctx, log), name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	r.settle(ctx, log, err, name)
	return out, created, err
}

// Delete deletes through the store, whose AfterDelete hook releases; a
// shutdown waits for both. Without preconditions, the store's first read
// comes from the watch cache, checked against what is deleted
// (delete_read.go).
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	done, err := r.alloc.beginWrite()
	if err != nil {
		return nil, false, err
	}
	defer done()
	ctx = r.guard(ctx)
	defer r.fenceDone(ctx)
	if options == nil || options.Preconditions == nil {
		read := &cachedRead{}
		out, deleted, err := r.Store.Delete(withCachedRead(ctx, read), name, read.guard(deleteValidation), options)
		if !errors.Is(err, errStaleRead) {
			return out, deleted, err
		}
	}
	return r.Store.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection is Delete for many Services.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	done, err := r.alloc.beginWrite()
	if err != nil {
		return nil, err
	}
	defer done()
	ctx = r.guard(ctx)
	defer r.fenceDone(ctx)
	return r.Store.DeleteCollection(ctx, deleteValidation, options, listOptions)
}

func (r *REST) beginCreate(ctx context.Context, obj runtime.Object, options *metav1.CreateOptions) (genericregistry.FinishFunc, error) {
	svc := obj.(*corev1.Service)
	if err := r.alloc.PrepareCreate(ctx, svc); err != nil {
		return nil, err
	}
	txn, err := r.alloc.AllocateCreate(ctx, svc, dryrun.IsDryRun(options.DryRun))
	if err != nil {
		return nil, err
	}
	return finisher(ctx, txn, svc, nil), nil
}

func (r *REST) beginUpdate(ctx context.Context, obj, old runtime.Object, options *metav1.UpdateOptions) (genericregistry.FinishFunc, error) {
	svc, oldSvc := obj.(*corev1.Service), old.(*corev1.Service)
	// The stored object may predate fields the update logic relies on.
	r.alloc.DefaultOnRead(oldSvc)
	if err := r.alloc.PrepareUpdate(ctx, svc, oldSvc); err != nil {
		return nil, err
	}
	txn, err := r.alloc.AllocateUpdate(ctx, svc, oldSvc, dryrun.IsDryRun(options.DryRun))
	if err != nil {
		return nil, err
	}
	return finisher(ctx, txn, svc, oldSvc), nil
}

// afterDelete releases the addresses of a deleted Service, exactly once: only
// in the request whose storage delete removed the object.
//
// k8s.io/apiserver runs AfterDelete for more than that request. When several
// updates race to remove a deleting Service's last finalizer, each ends in
// the store's delete-without-finalizers path; the losers' storage deletes
// fail with NotFound and the store still calls AfterDelete for them (with
// the object of their request), and a delete whose storage delete found the
// object gone after a graceful/finalizer update does the same with its last
// read. Releasing there would free the address again, several times, and
// if another Service had taken it meanwhile, a duplicate would follow.
// The store calls AfterDelete after a successful storage delete with the very
// object that delete decoded into, so deleteTracking records those objects
// and only they release.
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
	if !r.deletes.take(obj) {
		klog.FromContext(ctx).V(2).Info("Not releasing cluster IPs: another request deleted the Service",
			"service", klog.KObj(svc), "uid", svc.UID)
		return
	}
	r.alloc.Release(ctx, svc)
}

// deleteLog holds the objects storage deletes have decoded the removed
// Service into, until the store's AfterDelete hook takes them.
type deleteLog struct {
	mu   sync.Mutex
	objs map[runtime.Object]struct{} // keyed by pointer identity; guarded by mu
}

func (l *deleteLog) add(obj runtime.Object) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.objs[obj] = struct{}{}
}

// take reports whether obj came from a successful storage delete, and
// forgets it.
func (l *deleteLog) take(obj runtime.Object) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.objs[obj]
	delete(l.objs, obj)
	return ok
}

// deleteTracking is the store's storage, recording the output object of
// every delete that removed its key, including one whose answer was lost
// (settleDelete). Dry-run deletes never reach it (the store's
// DryRunnableStorage answers them itself).
type deleteTracking struct {
	storage.Interface
	log    *deleteLog
	fencer Fencer // set by NewREST; nil: a delete whose answer was lost releases nothing
}

// ServesStoredLists tells whether the storage below serves lists from
// stored bytes (internal/rawlist's Source): a store that records deletes
// reads lists as the storage does.
func (d *deleteTracking) ServesStoredLists() bool {
	s, ok := d.Interface.(interface{ ServesStoredLists() bool })
	return ok && s.ServesStoredLists()
}

// Get is the storage's, but for the first read of a Service delete, which
// the watch cache answers (delete_read.go).
func (d *deleteTracking) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	if opts.ResourceVersion == "" {
		if read := takeCachedRead(ctx); read != nil {
			return read.get(ctx, d.Interface, key, opts, out)
		}
	}
	return d.Interface.Get(ctx, key, opts, out)
}

func (d *deleteTracking) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	if err := d.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts); err != nil {
		if err = d.settleDelete(ctx, key, out, err); err != nil {
			return err
		}
	}
	if _, ok := out.(*corev1.Service); ok {
		d.log.add(out)
	}
	return nil
}

// Compile-time checks: REST serves what the store serves.
var (
	_ rest.Creater = &REST{}
	_ rest.Updater = &REST{}
)
