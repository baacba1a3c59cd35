package servicealloc

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
)

// The read a Service delete starts with.
//
// k8s.io/apiserver's Store.Delete first reads the object from etcd, a quorum
// read, to decide how to delete it (at once, or by setting a deletion
// timestamp while finalizers remain), then hands the watch cache's copy to
// the storage's delete, which compares its revision in the delete
// transaction. A Service delete without preconditions takes that first read
// from the watch cache as well: one etcd read less per delete.
//
// A copy in the watch cache may lag etcd by a few milliseconds, and a
// decision made on an older object could delete at once a Service that just
// got a finalizer. So the decision is checked where it is carried out: the
// delete's validation, which the storage runs on the very object its
// transaction removes (or, for finalizers, updates), fails with
// errStaleRead unless that object is the one read, at the same
// resourceVersion; the delete is then made again from a quorum read, as
// kube-apiserver makes it. This is stricter than kube-apiserver, whose
// decision is not checked against the object its delete removes.
// A delete with preconditions (UID, resourceVersion) reads from etcd: the
// store checks them against what it read. So does the delete of a Service
// the cache shows marked for deletion already: the store then answers with
// what it read and calls no validation.

// errStaleRead ends a delete whose cached read was not the object deleted.
var errStaleRead = errors.New("servicealloc: the Service changed since its cached read")

// cachedRead is one delete's read from the watch cache.
type cachedRead struct {
	taken atomic.Bool // the first Get of the delete took it
	// rv is the resourceVersion of what the read returned; "" if it came
	// from etcd (not in the cache). Written by the store's Get, read by the
	// validation later in the same request.
	rv atomic.Pointer[string]
}

type cachedReadKey struct{}

func withCachedRead(ctx context.Context, r *cachedRead) context.Context {
	return context.WithValue(ctx, cachedReadKey{}, r)
}

// take returns the cached read of ctx's delete if this Get is its first.
func takeCachedRead(ctx context.Context) *cachedRead {
	r, _ := ctx.Value(cachedReadKey{}).(*cachedRead)
	if r == nil || !r.taken.CompareAndSwap(false, true) {
		return nil
	}
	return r
}

// get is the storage's Get for the first read of a delete: from the watch
// cache (resourceVersion "0"), deep-copied, since the cache's objects are
// shared and the store may change what it read; from etcd when the cache
// does not have it.
func (r *cachedRead) get(ctx context.Context, s storage.Interface, key string, opts storage.GetOptions, out runtime.Object) error {
	cached := opts
	cached.ResourceVersion = "0"
	if err := s.Get(ctx, key, cached, out); err != nil {
		return s.Get(ctx, key, opts, out)
	}
	accessor, err := meta.Accessor(out)
	if err != nil {
		return err
	}
	if accessor.GetDeletionTimestamp() != nil {
		// Already marked: the store answers with what it read and writes
		// nothing, so no validation would check a stale copy.
		return s.Get(ctx, key, opts, out)
	}
	reflect.ValueOf(out).Elem().Set(reflect.ValueOf(out.DeepCopyObject()).Elem())
	rv := accessor.GetResourceVersion()
	r.rv.Store(&rv)
	return nil
}

// guard wraps a delete's validation: the object the storage deletes or
// updates must be the one the cached read returned.
func (r *cachedRead) guard(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if rv := r.rv.Load(); rv != nil {
			accessor, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			if accessor.GetResourceVersion() != *rv {
				return errStaleRead
			}
		}
		if validate == nil {
			return nil
		}
		return validate(ctx, obj)
	}
}
