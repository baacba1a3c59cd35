package listhold

import (
	"sync"
	"time"
)

// Limits bound how long a list holds its revision.
type Limits struct {
	// Idle ends a hold when no page of its list was served for this long.
	Idle time.Duration
	// MaxAge ends a hold this long after its list's first page.
	MaxAge time.Duration
}

// The default limits let a list page on while its client asks for the next
// page within a minute, for up to 10 minutes: a million objects read by
// kubectl (2,000 pages of 500 at five requests a second) take about 7.
const (
	DefaultIdle   = time.Minute
	DefaultMaxAge = 10 * time.Minute
)

// WithDefaults fills each zero limit with DefaultIdle or DefaultMaxAge.
func (l Limits) WithDefaults() Limits {
	if l.Idle <= 0 {
		l.Idle = DefaultIdle
	}
	if l.MaxAge <= 0 {
		l.MaxAge = DefaultMaxAge
	}
	return l
}

// Holds are one server's holds: the revisions of the paged lists it is
// serving. The zero value is not usable; NewHolds makes one.
type Holds struct {
	limits Limits
	now    func() time.Time
	// changed is signalled (without blocking) when a new revision is held,
	// so that Shared publishes it without waiting for its next refresh.
	changed chan struct{}

	mu    sync.Mutex
	byRev map[int64]span // guarded by mu
}

// span is when a held list's first and latest pages were served.
type span struct{ first, last time.Time }

// NewHolds returns empty holds bounded by limits (zero limits: the defaults)
// on the clock now (nil: time.Now).
func NewHolds(limits Limits, now func() time.Time) *Holds {
	if now == nil {
		now = time.Now
	}
	return &Holds{
		limits:  limits.WithDefaults(),
		now:     now,
		changed: make(chan struct{}, 1),
		byRev:   make(map[int64]span),
	}
}

// Touch records a page served at revision rev whose answer continues: its
// list holds rev for another Limits.Idle. A revision of 0 or less is none.
func (h *Holds) Touch(rev int64) {
	if rev <= 0 {
		return
	}
	now := h.now()
	h.mu.Lock()
	s, held := h.byRev[rev]
	if !held {
		s.first = now
	}
	s.last = now
	h.byRev[rev] = s
	h.mu.Unlock()
	if !held {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// Oldest is the oldest revision held, and whether any is; it drops the
// holds that ended.
func (h *Holds) Oldest() (int64, bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest int64
	for rev, s := range h.byRev {
		if now.Sub(s.last) > h.limits.Idle || now.Sub(s.first) > h.limits.MaxAge {
			delete(h.byRev, rev)
			continue
		}
		if oldest == 0 || rev < oldest {
			oldest = rev
		}
	}
	return oldest, oldest != 0
}

// Changed is signalled when a revision not held before is.
func (h *Holds) Changed() <-chan struct{} { return h.changed }
