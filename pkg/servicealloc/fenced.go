package servicealloc

import (
	"context"
	"errors"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/etcdquota"
)

// Fencer makes the outcome of a Service write known (internal/fence is the
// etcd one). Without it, a write whose outcome is unknown releases nothing
// that it may still store.
type Fencer interface {
	// Guard returns ctx with a fence of its own: every write of the
	// Service's storage made with it honours the fence.
	Guard(ctx context.Context) context.Context
	// Done says the request of ctx (from Guard) writes no more and needs
	// the outcome of its writes no more; it is called once per request,
	// after whatever settles its writes in the background.
	Done(ctx context.Context)
	// Close closes the fence of ctx (from Guard), after which no write made
	// under it can be applied, and tells what became of the request's last
	// write of the Service namespace/name. An error that wraps
	// ErrWritesEnded says the outcome is lost but no write of the request
	// can be applied any more (its lease ended): a read is then final. Any
	// other error leaves the fence as it was: a later Close may succeed.
	Close(ctx context.Context, namespace, name string) (FenceOutcome, error)
	// Replaced returns the Service that the request's last write of
	// namespace/name replaced (its compare's version); nil for a create.
	Replaced(ctx context.Context, namespace, name string) (*corev1.Service, error)
}

// ErrWritesEnded is wrapped by a Fencer's Close error when the write's
// outcome can no longer be learned, but no write of the request can be
// applied any more either.
var ErrWritesEnded = errors.New("no write of the request can be applied any more")

// FenceOutcome is the fate of a request's last write of a Service, known
// for good.
type FenceOutcome struct {
	// Landed reports whether the write was applied.
	Landed bool
	// Delete reports whether that write was a delete (else a put).
	Delete bool
	// Stored is the Service as stored once the fence was closed: nil when
	// absent.
	Stored *corev1.Service
}

// guard gives ctx the request's fence, when there is a Fencer.
func (r *REST) guard(ctx context.Context) context.Context {
	if r.fencer == nil {
		return ctx
	}
	return r.fencer.Guard(ctx)
}

// fenceDone ends the request's fence, when there is a Fencer.
func (r *REST) fenceDone(ctx context.Context) {
	if r.fencer != nil {
		r.fencer.Done(ctx)
	}
}

// readBack learns the outcome of a create or update of the Service name
// that failed (settle.go): through the request's fence, or else from a
// plain read, final after etcd's quota error only.
func (r *REST) readBack(name string) readBack {
	return func(ctx context.Context, writeErr error) afterWrite {
		if name == "" {
			return afterWrite{err: errors.New("no name to read the Service back by")}
		}
		namespace, _ := genericapirequest.NamespaceFrom(ctx)
		if r.fencer != nil {
			o, err := r.fencer.Close(ctx, namespace, name)
			if err == nil {
				if o.Stored != nil {
					r.alloc.DefaultOnRead(o.Stored)
				}
				// The create or update is the request's last put: an applied
				// delete after it (an update that removed the last
				// finalizer) means the put itself was never written.
				return afterWrite{fenced: true, landed: o.Landed && !o.Delete, stored: o.Stored, final: true}
			}
			klog.FromContext(ctx).Info("Could not learn a failed Service write's outcome through its fence; reading the Service",
				"service", klog.KRef(namespace, name), "err", err)
			// Once no write of the request can land, a read is final;
			// before, a later Close may still learn the outcome.
			after := r.readService(ctx, name, errors.Is(err, ErrWritesEnded) || etcdquota.Exceeded(writeErr))
			after.retry = !errors.Is(err, ErrWritesEnded) && !etcdquota.Exceeded(err)
			return after
		}
		return r.readService(ctx, name, etcdquota.Exceeded(writeErr))
	}
}

// readService reads the Service name back after a failed write; final says
// no write of the request can be applied after the read.
func (r *REST) readService(ctx context.Context, name string, final bool) afterWrite {
	obj, err := r.Store.Get(ctx, name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return afterWrite{final: final}
	}
	if err != nil {
		return afterWrite{err: err}
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return afterWrite{err: fmt.Errorf("read back %s: not a Service: %T", name, obj)}
	}
	return afterWrite{stored: svc, final: final}
}

// settleDelete learns, through the request's fence, whether a storage
// delete of key that failed with err removed the Service. When it did, the
// Service it removed is decoded into out and the delete answers success, so
// that the store's AfterDelete releases what it held, as for any delete.
// Otherwise, or when that cannot be learned, err is returned and nothing is
// released: the Service is still stored, another request deleted it (and
// released), or the repair frees what it held.
func (d *deleteTracking) settleDelete(ctx context.Context, key string, out runtime.Object, err error) error {
	svc, ok := out.(*corev1.Service)
	if d.fencer == nil || !ok || deleteRefused(err) {
		return err
	}
	namespace, name := path.Base(path.Dir(key)), path.Base(key)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	log := klog.FromContext(ctx).WithValues("service", klog.KRef(namespace, name), "err", err)
	o, cerr := d.fencer.Close(ctx, namespace, name)
	if cerr != nil {
		log.Info("A Service delete failed and its outcome is unknown; leaving what the Service held to the repair", "fenceErr", cerr)
		return err
	}
	if !o.Landed || !o.Delete { // not applied, or the last write was a put (a graceful update), not this delete
		return err
	}
	removed, rerr := d.fencer.Replaced(ctx, namespace, name)
	if rerr != nil || removed == nil {
		log.Info("A Service delete failed after it was applied, and the Service it removed is unreadable; leaving what it held to the repair", "readErr", rerr)
		return err
	}
	log.Info("A Service delete failed after it was applied; releasing what the Service held")
	*svc = *removed
	return nil
}

// deleteRefused reports whether err, from a storage delete, says nothing
// was deleted: refused by the API (admission, validation), or by storage
// (not found, a precondition or compare that failed).
func deleteRefused(err error) bool {
	return writeRefused(err) || storage.IsNotFound(err) || storage.IsConflict(err) || storage.IsInvalidObj(err)
}
