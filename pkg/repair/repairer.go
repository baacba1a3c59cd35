package repair

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
)

// LeakPasses is how many consecutive passes must see a key allocated with no
// Service before it is freed. An allocation is written before its Service,
// so one pass can see the bit of a Service that is still being created;
// three passes minutes apart cannot, unless it leaked.
const LeakPasses = 3

// MaxConflictReruns bounds how often Run reruns a map whose write lost to a
// concurrent allocation. With the merge a rerun is rare: it happens only
// when MaxMergeAttempts merges in a row lost.
const MaxConflictReruns = 10

// MaxMergeAttempts bounds how often one pass's changes are merged onto a
// freshly read map after losing the compare-and-swap to an allocation.
const MaxMergeAttempts = 100

// Store is one stored map, read with its ModRevision and written with a
// compare-and-swap on it; *clusterip.EtcdAllocator and *nodeport.EtcdAllocator
// implement it.
type Store interface {
	ReadStored(ctx context.Context) (bitmap.StoredMap, error)
	CompareAndWrite(ctx context.Context, data []byte, base bitmap.StoredMap) (int64, error)
}

// Space maps the keys of one range (addresses, ports) to the slots of its map.
type Space[K comparable] interface {
	// Slots is the number of slots and StaticSlots the lower (static) band.
	Slots() int
	StaticSlots() int
	// Index is k's slot, false when k is outside the range.
	Index(k K) (int, bool)
	// Key is the key of slot i, 0 ≤ i < Slots().
	Key(i int) K
	// String names the range in errors.
	String() string
}

// Config configures a Repairer.
type Config[K comparable] struct {
	// Store is the stored map.
	Store Store
	// Space maps keys to its slots.
	Space Space[K]
	// Services reads a Service again before its key is set on a fresh map.
	Services corev1client.ServicesGetter
	// Holds reports whether svc holds k; it is asked of a Service read again.
	Holds func(svc *corev1.Service, k K) bool
	// LeakGrace is the least time between the first pass that sees a key
	// leaked and the pass that frees it (default DefaultLeakGrace).
	LeakGrace time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// leakState tracks one key seen allocated with no Service.
type leakState struct {
	passesLeft int       // passes to go before it may be freed
	firstSeen  time.Time // when a pass first saw it leaked
}

// Repairer repairs one stored map, pass after pass. It carries the leak
// counts from one pass to the next; passes must not run concurrently.
type Repairer[K comparable] struct {
	cfg Config[K]
	// leaks counts, per key, the passes left before a leaked key is freed.
	// Only the goroutine running a pass touches it.
	leaks map[K]leakState
}

// New checks cfg and returns a Repairer.
func New[K comparable](cfg Config[K]) (*Repairer[K], error) {
	if cfg.Store == nil || cfg.Space == nil || cfg.Services == nil || cfg.Holds == nil {
		return nil, errors.New("range repair: a store, a space, a Service client and Holds are required")
	}
	if cfg.LeakGrace <= 0 {
		cfg.LeakGrace = DefaultLeakGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Repairer[K]{cfg: cfg, leaks: map[K]leakState{}}, nil
}

func (r *Repairer[K]) newSet() (*bitset.Set, error) {
	s, err := bitset.New(r.cfg.Space.Slots(), r.cfg.Space.StaticSlots())
	if err != nil {
		return nil, fmt.Errorf("map of %s: %w", r.cfg.Space, err)
	}
	return s, nil
}

// decode returns the set stored in data.
func (r *Repairer[K]) decode(data []byte) (*bitset.Set, error) {
	s, err := r.newSet()
	if err != nil {
		return nil, err
	}
	if err := s.SetBytes(data); err != nil {
		return nil, fmt.Errorf("restore stored map of %s: %w", r.cfg.Space, err)
	}
	return s, nil
}

// Run makes one pass over every repairer: it reads each one's map, lists once
// (after the reads, see the package doc), and calls repair with each pass. A
// repair that fails with bitmap.ErrConflict (its write lost too often, or the
// map was deleted meanwhile) is rerun from a fresh read and a fresh list, at
// most MaxConflictReruns times; any other error ends the pass.
func Run[K comparable, L any](ctx context.Context, repairers []*Repairer[K], list func(context.Context) (L, error),
	repair func(ctx context.Context, i int, p *Pass[K], listed L) error) error {
	pending := make([]int, len(repairers))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > MaxConflictReruns {
			return fmt.Errorf("gave up after %d writes lost to concurrent allocations", MaxConflictReruns)
		}
		maps := make([]bitmap.StoredMap, len(pending))
		for j, i := range pending {
			m, err := repairers[i].cfg.Store.ReadStored(ctx)
			if err != nil {
				return err
			}
			maps[j] = m
		}
		listed, err := list(ctx)
		if err != nil {
			return err
		}
		var conflicted []int
		for j, i := range pending {
			p, err := repairers[i].Begin(maps[j])
			if err != nil {
				return err
			}
			err = repair(ctx, i, p, listed)
			if errors.Is(err, bitmap.ErrConflict) {
				conflicted = append(conflicted, i)
				continue
			}
			if err != nil {
				return err
			}
		}
		pending = conflicted
	}
	return nil
}
