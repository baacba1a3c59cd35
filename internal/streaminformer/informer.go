// Package streaminformer is a shared informer whose store fills from the
// initial events of a watch as they arrive.
//
// client-go's informer reads a watch's initial events into a store of its
// own, then, once the list is whole, replaces its store's contents with
// them on one goroutine (the items keyed again, every index rebuilt), and
// only then hands each object to the handlers. With a million objects those
// are three stages one after the other at every start. Here each object is
// stored, indexed and handed to the handlers as its event arrives, while the
// watch still reads the rest from etcd, and the handlers drain beside it.
//
// An Informer is a cache.SharedIndexInformer: listers, indexes, handlers and
// their HasSynced work as on client-go's. It differs where nothing may look:
//   - Before it has synced, its store holds the part of the initial list
//     read so far (client-go's is empty). HasSynced turns true only once
//     the whole list is in the store, at the watch's initial-events-end
//     bookmark.
//   - A relist (the watch's resource version compacted away) applies the new
//     list object by object, then deletes what it lacks; client-go's
//     replaces the store at once. Each step is an event a handler gets, as a
//     lagging watch would give it.
//   - Seeded (SetSeed), it starts from objects as they were at a resource
//     version (what Snapshot gave of a stopped informer, kept by the
//     caller) and watches on from that version; it has synced at the
//     watch's first bookmark, which it asks its source for.
//   - Handlers get no resync (no handler of this server asks for one on the
//     resources it serves), and SetWatchErrorHandler is refused: watch errors
//     are logged, and the watch starts again after a backoff.
//
// Invariant: the store changes before a handler hears of the change, and each
// handler hears of the changes in the order the store took them.
package streaminformer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Watcher is what an Informer reads: a watch that can begin with the
// current state as initial events (metav1.ListOptions.SendInitialEvents).
type Watcher interface {
	WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Informer is a cache.SharedIndexInformer filled from a watch's initial
// events (see the package doc).
type Informer struct {
	source      Watcher
	description string
	indexer     cache.Indexer
	syncedCh    chan struct{} // closed once the first list is whole

	// mu orders the store's changes with the handlers' registration: an
	// event is stored and handed to every listener under it, and a handler
	// joins under it with the store's contents as its adds.
	mu        sync.Mutex
	listeners []*listener
	transform cache.TransformFunc
	ctx       context.Context // Run's, once it runs
	stopped   bool
	// whole is set while the store is the state at lastRV: after a seed or
	// a whole list, not in the middle of one (Snapshot).
	whole bool

	seed     SeedFunc                        // set before Run; nil: none
	progress func(ctx context.Context) error // asks the source for a bookmark

	lastRV atomic.Pointer[string]
}

var _ cache.SharedIndexInformer = (*Informer)(nil)

// New returns an Informer of the objects source watches; description names
// them in logs (their type).
func New(source Watcher, description string, indexers cache.Indexers) *Informer {
	return &Informer{
		source:      source,
		description: description,
		indexer:     cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		syncedCh:    make(chan struct{}),
	}
}

// Backoff bounds between two watches when one failed.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// RunWithContext watches until ctx ends: a first watch with the whole state
// as its initial events, then watches from the last resource version seen,
// a new list when that is compacted away.
func (inf *Informer) RunWithContext(ctx context.Context) {
	inf.mu.Lock()
	if inf.ctx != nil || inf.stopped {
		inf.mu.Unlock()
		return // runs once
	}
	inf.ctx = ctx
	for _, l := range inf.listeners {
		go l.run(ctx)
	}
	inf.mu.Unlock()
	defer func() {
		inf.mu.Lock()
		inf.stopped = true
		inf.mu.Unlock()
	}()
	logger := klog.FromContext(ctx).WithValues("informer", inf.description)
	backoff := minBackoff
	relist := !inf.applySeed(ctx)
	for ctx.Err() == nil {
		listed, progressed, err := inf.watchOnce(ctx, relist)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && progressed:
			relist = false
			backoff = minBackoff
			continue // the watch ended: resume from the last version seen
		case err == nil: // ended at once: wait before the next
			relist = relist && !listed
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			logger.V(2).Info("Watch expired, listing again", "err", err)
			relist = true
		default:
			logger.Error(err, "Watch failed")
			relist = relist && !listed // a list cut short is read again whole
		}
		if progressed {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Run is RunWithContext until stopCh closes.
func (inf *Informer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	inf.RunWithContext(ctx)
}

// watchOnce runs one watch to its end: with relist, from the whole state
// as initial events, else from the last resource version seen. It reports
// whether the initial events were all read (listed) and whether the watch
// delivered anything.
func (inf *Informer) watchOnce(ctx context.Context, relist bool) (listed, progressed bool, err error) {
	opts := metav1.ListOptions{AllowWatchBookmarks: true}
	var pass *listPass
	rv := inf.lastRV.Load()
	relist = relist || rv == nil // nothing to resume from
	if relist {
		opts.SendInitialEvents = ptr.To(true)
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		pass = inf.newListPass()
	} else {
		opts.ResourceVersion = *rv
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := inf.source.WatchWithContext(ctx, opts)
	if err != nil {
		return false, false, fmt.Errorf("watch %s: %w", inf.description, err)
	}
	defer w.Stop()
	listed = !relist
	if !relist && !inf.HasSynced() && inf.progress != nil {
		go inf.askProgress(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return listed, progressed, nil
		case e, ok := <-w.ResultChan():
			if !ok {
				if !listed {
					return false, progressed, fmt.Errorf("watch %s ended before its initial events did", inf.description)
				}
				return listed, progressed, nil
			}
			done, err := inf.handle(e, pass)
			if err != nil {
				return listed, progressed, err
			}
			progressed = true
			if done {
				pass, listed = nil, true
			}
		}
	}
}

// handle applies one event; done reports the end of the initial events.
func (inf *Informer) handle(e watch.Event, pass *listPass) (done bool, err error) {
	switch e.Type {
	case watch.Error:
		return false, apierrors.FromObject(e.Object)
	case watch.Bookmark:
		rv, err := resourceVersion(e.Object)
		if err != nil {
			return false, err
		}
		inf.lastRV.Store(&rv)
		if pass == nil {
			inf.indexer.Bookmark(rv)
			if !inf.HasSynced() {
				// A seeded store: the source has sent every change up to a
				// version it reached after this watch began.
				inf.mu.Lock()
				inf.markSynced()
				inf.mu.Unlock()
			}
			return false, nil
		}
		if !isInitialEventsEnd(e.Object) {
			return false, nil
		}
		inf.mu.Lock()
		defer inf.mu.Unlock()
		pass.finish()
		// The store is the list as of rv. Each add of the list set the
		// store's version to its object's, in key order, not revision
		// order; its readers (LastStoreSyncResourceVersion) take the list's.
		inf.indexer.Bookmark(rv)
		return true, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return false, fmt.Errorf("watch %s: event of type %q", inf.description, e.Type)
	}
	rv, err := resourceVersion(e.Object)
	if err != nil {
		return false, err
	}
	var obj any = e.Object
	if inf.transform != nil {
		if obj, err = inf.transform(obj); err != nil {
			return false, fmt.Errorf("transform %s: %w", inf.description, err)
		}
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return false, fmt.Errorf("key of %s: %w", inf.description, err)
	}
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if e.Type == watch.Deleted {
		if err := inf.indexer.Delete(obj); err != nil {
			return false, err
		}
		inf.notify(notification{kind: deleted, obj: obj})
	} else if err := inf.store(key, obj, pass); err != nil {
		return false, err
	}
	if pass == nil {
		inf.lastRV.Store(&rv) // an initial event's version is the object's, not the list's
	}
	return false, nil
}

// store adds or updates obj under key, and tells the handlers. A list into
// an empty store adds without a lookup: a list names each key once.
func (inf *Informer) store(key string, obj any, pass *listPass) error {
	var (
		old    any
		exists bool
		err    error
	)
	if pass != nil {
		pass.saw(key)
	}
	if pass == nil || pass.seen != nil {
		if old, exists, err = inf.indexer.GetByKey(key); err != nil {
			return err
		}
	}
	if exists {
		if err := inf.indexer.Update(obj); err != nil {
			return err
		}
		inf.notify(notification{kind: updated, old: old, obj: obj})
		return nil
	}
	if err := inf.indexer.Add(obj); err != nil {
		return err
	}
	inf.notify(notification{kind: added, obj: obj, initial: !inf.HasSynced()})
	return nil
}

// notify hands n to every handler; inf.mu is held.
func (inf *Informer) notify(n notification) {
	for _, l := range inf.listeners {
		l.add(n)
	}
}

// listPass is one list's state: the keys its initial events named, to
// delete what the store holds beyond them once it is whole. The first list
// fills an empty store and tracks nothing.
type listPass struct {
	inf  *Informer
	seen map[string]struct{} // nil on the first list
}

func (inf *Informer) newListPass() *listPass {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	p := &listPass{inf: inf}
	inf.whole = false
	if len(inf.indexer.ListKeys()) > 0 {
		p.seen = map[string]struct{}{}
	}
	return p
}

func (p *listPass) saw(key string) {
	if p.seen != nil {
		p.seen[key] = struct{}{}
	}
}

// finish deletes what the list lacks and, after the first list, marks the
// informer and each handler's registration synced; inf.mu is held.
func (p *listPass) finish() {
	inf := p.inf
	if p.seen != nil {
		for _, key := range inf.indexer.ListKeys() {
			if _, ok := p.seen[key]; ok {
				continue
			}
			obj, exists, err := inf.indexer.GetByKey(key)
			if err != nil || !exists {
				continue
			}
			if err := inf.indexer.Delete(obj); err == nil {
				inf.notify(notification{kind: deleted, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}})
			}
		}
	}
	inf.whole = true
	inf.markSynced()
}

// markSynced marks the informer and each handler's registration synced,
// unless they are already; inf.mu is held.
func (inf *Informer) markSynced() {
	if inf.HasSynced() {
		return
	}
	for _, l := range inf.listeners {
		l.syncAt(l.enqueued())
	}
	close(inf.syncedCh)
}

// resourceVersion reads obj's resourceVersion.
func resourceVersion(obj runtime.Object) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("resourceVersion of %T: %w", obj, err)
	}
	return m.GetResourceVersion(), nil
}

// isInitialEventsEnd reports whether a bookmark ends a watch's initial
// events.
func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// ErrStopped is returned by the methods that change an Informer once its Run
// has returned.
var ErrStopped = errors.New("the informer has stopped")
