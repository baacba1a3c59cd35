package streaminformer

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

type notificationKind uint8

const (
	added notificationKind = iota
	updated
	deleted
)

// notification is one change for a handler.
type notification struct {
	kind     notificationKind
	initial  bool // an add of the informer's first list, or of the store a late handler joins
	old, obj any
}

// listener hands one handler its notifications, in order, on a goroutine of
// its own: the informer appends and never waits for a handler, so a slow
// one delays only itself. The queue is unbounded, as client-go's is.
type listener struct {
	handler cache.ResourceEventHandler
	name    string

	mu      sync.Mutex
	queue   []notification
	added   int64         // notifications ever queued
	wake    chan struct{} // one pending wake-up
	stop    chan struct{} // closed when the handler is removed
	stopped bool

	processed atomic.Int64
	// target is how many notifications the handler must have processed to
	// have synced: -1 until the informer has synced.
	target   atomic.Int64
	syncedCh chan struct{}
	synced   sync.Once
}

func newListener(handler cache.ResourceEventHandler, name string) *listener {
	l := &listener{
		handler:  handler,
		name:     name,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		syncedCh: make(chan struct{}),
	}
	l.target.Store(-1)
	return l
}

// add queues n; the informer's mu is held.
func (l *listener) add(n notification) {
	l.mu.Lock()
	l.queue = append(l.queue, n)
	l.added++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// enqueued is how many notifications were ever queued; the informer's mu is
// held.
func (l *listener) enqueued() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.added
}

// syncAt marks the handler synced once it has processed n notifications.
func (l *listener) syncAt(n int64) {
	l.target.Store(n)
	l.checkSynced()
}

func (l *listener) checkSynced() {
	if t := l.target.Load(); t >= 0 && l.processed.Load() >= t {
		l.synced.Do(func() { close(l.syncedCh) })
	}
}

// run calls the handler for each notification until ctx ends or the
// handler is removed.
func (l *listener) run(ctx context.Context) {
	var batch []notification
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.stop:
			return
		case <-l.wake:
		}
		l.mu.Lock()
		batch, l.queue = l.queue, batch[:0]
		l.mu.Unlock()
		for i, n := range batch {
			switch n.kind {
			case added:
				l.handler.OnAdd(n.obj, n.initial)
			case updated:
				l.handler.OnUpdate(n.old, n.obj)
			case deleted:
				l.handler.OnDelete(n.obj)
			}
			batch[i] = notification{} // the objects are not held past their turn
			l.processed.Add(1)
		}
		l.checkSynced()
	}
}

// remove stops the handler's goroutine.
func (l *listener) remove() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.stopped = true
		close(l.stop)
	}
}

// HasSynced reports whether the informer has synced and the handler has
// processed every notification queued before that.
func (l *listener) HasSynced() bool { return isClosed(l.syncedCh) }

// HasSyncedChecker is HasSynced as a channel.
func (l *listener) HasSyncedChecker() cache.DoneChecker { return doneChecker{l.name, l.syncedCh} }

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// doneChecker is a cache.DoneChecker of a channel.
type doneChecker struct {
	name string
	done chan struct{}
}

func (d doneChecker) Name() string          { return d.name }
func (d doneChecker) Done() <-chan struct{} { return d.done }
