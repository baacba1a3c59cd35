package servicealloc

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
)

// writes counts the Service writes (create, update, delete) in progress,
// their reservations and releases included, so that a shutdown lets them
// finish before the server stops serving: a delete whose Service is gone
// but whose addresses are not yet released would otherwise leave them held
// until repair frees them.
type writes struct {
	mu       sync.Mutex
	draining bool          // guarded by mu
	n        int           // guarded by mu
	idle     chan struct{} // closed when n reaches 0 while draining; guarded by mu
}

// begin admits one write, or refuses it (503, Retry-After) once draining.
func (a *Allocator) beginWrite() (func(), error) {
	w := &a.writes
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    503,
			Reason:  metav1.StatusReasonServiceUnavailable,
			Message: "the server is shutting down: send the request to another replica",
			Details: &metav1.StatusDetails{RetryAfterSeconds: a.retryAfter},
		}}
	}
	w.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.n--
			if w.n == 0 && w.idle != nil {
				close(w.idle)
				w.idle = nil
			}
		})
	}, nil
}

// Drain refuses new Service writes (503 with Retry-After) and waits until
// the ones in progress have finished, with their releases, or until ctx
// ends. The server calls it on shutdown before it stops serving, so the
// writes in flight still reach the API they release through.
func (a *Allocator) Drain(ctx context.Context) error {
	w := &a.writes
	w.mu.Lock()
	w.draining = true
	if w.n == 0 {
		w.mu.Unlock()
		return nil
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	idle := w.idle
	w.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		n := w.n
		w.mu.Unlock()
		return fmt.Errorf("%d Service writes still in progress: %w", n, ctx.Err())
	}
}

// draining reports whether Drain was called.
func (a *Allocator) draining() bool {
	a.writes.mu.Lock()
	defer a.writes.mu.Unlock()
	return a.writes.draining
}

// Open admits reservations (see Config.StartClosed). It is idempotent.
func (a *Allocator) Open() { a.closed.Store(false) }

// admitReservation refuses a reservation while the Allocator is closed.
func (a *Allocator) admitReservation() error {
	if a.closed.Load() {
		return allocation.ErrNotReady
	}
	return nil
}
