package repair

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// InFlight tells which writes of the API servers may still be applied. A
// server of ours sends each Service write with an etcd lease of its own and
// can have it applied only while that lease lives (internal/fence); a write
// whose answer was lost may land until then, long after its request ended.
// A reservation such a write may still claim is not a leak yet.
type InFlight interface {
	// Leases returns the names of the write leases alive now.
	Leases(ctx context.Context) ([]string, error)
}

// Horizon tells when every write that was in flight at some moment has
// ended. It remembers when it first saw each write lease alive; the writes
// in flight at a moment t it observed are over once no lease first seen at
// or before t is alive any more. Without an InFlight source (a cluster of
// kube-apiservers, whose writes do not outlive their requests) every moment
// is over at once. It is safe for concurrent use.
type Horizon struct {
	src InFlight
	now func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // alive at the last Observe → first seen; guarded by mu
}

// NewHorizon returns a Horizon over src (nil: none) on the clock now.
func NewHorizon(src InFlight, now func() time.Time) *Horizon {
	if now == nil {
		now = time.Now
	}
	return &Horizon{src: src, now: now, seen: map[string]time.Time{}}
}

// Observe reads the write leases alive now and returns the moment it read
// them, on the Horizon's clock: a write in flight at that moment carries
// one of them.
func (h *Horizon) Observe(ctx context.Context) (time.Time, error) {
	t := h.now()
	if h.src == nil {
		return t, nil
	}
	alive, err := h.src.Leases(ctx)
	if err != nil {
		return t, fmt.Errorf("read the write leases in flight: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	next := make(map[string]time.Time, len(alive))
	for _, id := range alive {
		// The earlier of the two: Observes run concurrently, and one that
		// took its moment first may finish last; a lease it lists was
		// alive at its moment, or came after it (counting it alive then
		// only waits longer).
		first, ok := h.seen[id]
		if !ok || t.Before(first) {
			first = t
		}
		next[id] = first
	}
	h.seen = next
	return t, nil
}

// Ended reports whether every write in flight at t, a moment Observe
// returned, had ended by the last Observe.
func (h *Horizon) Ended(t time.Time) bool {
	if h.src == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, first := range h.seen {
		if !first.After(t) {
			return false
		}
	}
	return true
}

// InFlightCount is how many write leases the last Observe saw alive.
func (h *Horizon) InFlightCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}
