package repair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
)

// LeakPasses is how many consecutive passes must see a key allocated with no
// Service before it is freed. An allocation is written before its Service,
// so one pass can see the bit of a Service that is still being created;
// three passes minutes apart cannot, unless it leaked.
const LeakPasses = 3

// MaxConflictReruns bounds the rounds (Rounds) of a pass over a map whose
// write keeps losing to concurrent allocations. With the merge a rerun is
// rare: it happens only when MaxMergeAttempts merges in a row lost.
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

// Config configures a Repairer.
type Config[K Key] struct {
	// Options: Client reads a Service again before its key is set on a
	// fresh map; LeakGrace and Now time the leaks.
	Options
	// Store is the stored map.
	Store Store
	// Space maps keys to its slots.
	Space Space[K]
}

// leakState tracks one key seen allocated with no Service.
type leakState struct {
	passesLeft int       // passes to go before it may be freed
	firstSeen  time.Time // when a pass first saw it leaked
	// graceOver is the first pass after the passes and the grace, zero
	// before: the key is freed once every write in flight then has ended.
	graceOver time.Time
}

// Repairer repairs one stored map, pass after pass. It carries the leak
// counts from one pass to the next; passes must not run concurrently.
type Repairer[K Key] struct {
	cfg Config[K]
	// leaks counts, per key, the passes left before a leaked key is freed.
	// Only the goroutine running a pass touches it.
	leaks map[K]leakState
	// inFlight tells when the writes in flight at a pass have ended.
	inFlight *Horizon
}

// New checks cfg and returns a Repairer.
func New[K Key](cfg Config[K]) (*Repairer[K], error) {
	if cfg.Store == nil || cfg.Space == nil || cfg.Client == nil {
		return nil, errors.New("range repair: a store, a space and a client are required")
	}
	cfg.Options = cfg.Options.WithDefaults()
	return &Repairer[K]{cfg: cfg, leaks: map[K]leakState{}, inFlight: NewHorizon(cfg.InFlight, cfg.Now)}, nil
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

// Rounds drives one pass over several maps (a family each for ClusterIPs,
// the one node-port map), in rounds: each round the caller begins a pass
// over every map still Pending (reading it), lists the Services once, after
// the reads (see the package doc), and finishes each pass. A map whose pass
// lost its write (Lost: bitmap.ErrConflict, its merged write lost too often
// or the map was deleted meanwhile) is pending again in the next round,
// from a fresh read and a fresh list; after MaxConflictReruns rounds Next
// gives up and Err says so. Any other error ends the pass: the caller
// returns it.
type Rounds struct {
	pending, lost []int
	round         int
	err           error
}

// NewRounds returns the rounds of a pass over maps 0 … n-1.
func NewRounds(n int) *Rounds {
	r := &Rounds{}
	for i := range n {
		r.lost = append(r.lost, i)
	}
	return r
}

// Next starts the next round; false when every map is done or the pass gave
// up (Err).
func (r *Rounds) Next() bool {
	r.pending, r.lost = r.lost, nil
	if len(r.pending) == 0 || r.err != nil {
		return false
	}
	if r.round == MaxConflictReruns {
		r.err = fmt.Errorf("gave up after %d writes lost to concurrent allocations", MaxConflictReruns)
		return false
	}
	r.round++
	return true
}

// Pending are the maps of this round, in order.
func (r *Rounds) Pending() []int { return r.pending }

// Lost reports whether err is a write of map i lost to a concurrent
// allocation; map i is then pending in the next round.
func (r *Rounds) Lost(i int, err error) bool {
	if !errors.Is(err, bitmap.ErrConflict) {
		return false
	}
	r.lost = append(r.lost, i)
	return true
}

// Err is why Next gave up, nil when every map is done.
func (r *Rounds) Err() error { return r.err }
