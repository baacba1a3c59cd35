package streaminformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
)

// AddEventHandler adds handler. Joining a running informer, it gets an add
// for each object in the store first (isInInitialList true), then the
// changes that follow.
func (inf *Informer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.stopped {
		return nil, fmt.Errorf("add a handler to the %s informer: %w", inf.description, ErrStopped)
	}
	l := newListener(handler, inf.description+" handler")
	for _, obj := range inf.indexer.List() {
		l.add(notification{kind: added, obj: obj, initial: true})
	}
	if inf.HasSynced() {
		l.syncAt(l.enqueued())
	}
	inf.listeners = append(inf.listeners, l)
	if inf.ctx != nil {
		go l.run(inf.ctx)
	}
	return l, nil
}

// AddEventHandlerWithResyncPeriod is AddEventHandler: an Informer makes no
// resyncs.
func (inf *Informer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, _ time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(handler)
}

// AddEventHandlerWithOptions is AddEventHandler: an Informer makes no
// resyncs and logs with Run's logger.
func (inf *Informer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, _ cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(handler)
}

// RemoveEventHandler stops handing notifications to a handler AddEventHandler
// registered.
func (inf *Informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	l, ok := handle.(*listener)
	if !ok {
		return fmt.Errorf("remove a handler of the %s informer: a registration of type %T is not one of its own", inf.description, handle)
	}
	inf.mu.Lock()
	defer inf.mu.Unlock()
	for i, have := range inf.listeners {
		if have == l {
			inf.listeners = append(inf.listeners[:i:i], inf.listeners[i+1:]...)
			l.remove()
			return nil
		}
	}
	return nil // removed already, as client-go allows
}

// GetStore returns the store (the indexer).
func (inf *Informer) GetStore() cache.Store { return inf.indexer }

// GetIndexer returns the store with its indexes.
func (inf *Informer) GetIndexer() cache.Indexer { return inf.indexer }

// AddIndexers adds indexes, built over what the store holds already.
func (inf *Informer) AddIndexers(indexers cache.Indexers) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.stopped {
		return fmt.Errorf("add indexes to the %s informer: %w", inf.description, ErrStopped)
	}
	return inf.indexer.AddIndexers(indexers)
}

// GetController returns the informer as a cache.Controller.
func (inf *Informer) GetController() cache.Controller { return controller{inf} }

// HasSynced reports whether the first list is whole in the store.
func (inf *Informer) HasSynced() bool { return isClosed(inf.syncedCh) }

// HasSyncedChecker is HasSynced as a channel.
func (inf *Informer) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{inf.description + " informer", inf.syncedCh}
}

// LastSyncResourceVersion returns the last resource version the watch
// reported ("" before any).
func (inf *Informer) LastSyncResourceVersion() string {
	if rv := inf.lastRV.Load(); rv != nil {
		return *rv
	}
	return ""
}

// errNoWatchErrorHandler refuses a watch error handler: client-go's are
// given its Reflector, which an Informer has none of.
var errNoWatchErrorHandler = errors.New("an informer that streams its list logs watch errors itself and takes no handler of them")

// SetWatchErrorHandler is refused (errNoWatchErrorHandler).
func (inf *Informer) SetWatchErrorHandler(cache.WatchErrorHandler) error {
	return errNoWatchErrorHandler
}

// SetWatchErrorHandlerWithContext is refused (errNoWatchErrorHandler).
func (inf *Informer) SetWatchErrorHandlerWithContext(cache.WatchErrorHandlerWithContext) error {
	return errNoWatchErrorHandler
}

// SetTransform sets the function each object goes through before it is
// stored; only before Run.
func (inf *Informer) SetTransform(transform cache.TransformFunc) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.ctx != nil || inf.stopped {
		return fmt.Errorf("set the transform of the %s informer: it has started", inf.description)
	}
	inf.transform = transform
	return nil
}

// IsStopped reports whether Run has returned.
func (inf *Informer) IsStopped() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.stopped
}

// controller is an Informer as a cache.Controller.
type controller struct{ inf *Informer }

func (c controller) RunWithContext(ctx context.Context)  { c.inf.RunWithContext(ctx) }
func (c controller) Run(stopCh <-chan struct{})          { c.inf.Run(stopCh) }
func (c controller) HasSynced() bool                     { return c.inf.HasSynced() }
func (c controller) HasSyncedChecker() cache.DoneChecker { return c.inf.HasSyncedChecker() }
func (c controller) LastSyncResourceVersion() string     { return c.inf.LastSyncResourceVersion() }
