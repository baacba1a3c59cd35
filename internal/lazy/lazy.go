// Package lazy holds a value derived from an informer's cache (parsed
// ServiceCIDRs, say) that is rebuilt on the first read after the cache
// changed, instead of on every read.
package lazy

import (
	"sync"
	"sync/atomic"
)

// Value is a derived value. The zero value is ready to use and builds on
// its first Get.
type Value[T any] struct {
	current atomic.Bool // false: rebuild at the next Get

	mu sync.Mutex
	v  T // guarded by mu
}

// Invalidate makes the next Get rebuild. Call it from the informer's event
// handler: an informer updates its store before it calls the handlers, so
// the rebuild sees the change.
func (l *Value[T]) Invalidate() { l.current.Store(false) }

// Get returns the value, first rebuilding it with build if it was
// invalidated since the last build. The flag is cleared before build runs,
// so an Invalidate during a build is not lost. A build that fails leaves
// the value invalidated and returns the last one with the error.
func (l *Value[T]) Get(build func() (T, error)) (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current.CompareAndSwap(false, true) {
		v, err := build()
		if err != nil {
			l.current.Store(false)
			return l.v, err
		}
		l.v = v
	}
	return l.v, nil
}
