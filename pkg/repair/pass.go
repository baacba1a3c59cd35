package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
)

// Outcome is what Hold found for a key a Service holds.
type Outcome int

const (
	// Held: the key is allocated and this is its first holder.
	Held Outcome = iota
	// Missing: the key is not allocated; Commit sets it.
	Missing
	// Duplicate: an earlier Service of this pass holds the key.
	Duplicate
	// OutOfRange: the key is outside the range.
	OutOfRange
)

// Pass is one repair pass over a stored map, driven by its caller step by
// step: Begin reads the map, then (after the Services are listed) Hold for
// every key every Service holds (oldest Service first, so of two holders
// the older keeps the key), then Leaks, then Finish (or Commit), unless the
// pass is a dry run, which changes nothing and counts nothing.
type Pass[K Key] struct {
	r      *Repairer[K]
	stored bitmap.StoredMap
	now    time.Time
	// unheld is the stored map less every held key: what remains are leaks.
	unheld  *bitset.Set
	rebuilt *bitset.Set
	// The changes this pass makes, merged onto a fresh map if the write
	// loses to a concurrent allocation.
	toSet, toClear []int
	holders        map[int]*corev1.Service // the Service each toSet slot was found on
	// leaks are the counts this pass commits, once Leaks has walked them
	// (found, in ascending order).
	leaks  map[K]leakState
	walked bool
	found  []Leak[K]
}

// Begin reads the stored map and starts a pass over it: the first step of a
// pass, taken before the Services are listed (see the package doc).
func (r *Repairer[K]) Begin(ctx context.Context) (*Pass[K], error) {
	// The writes in flight are read first: one that may still store the
	// Service of a reservation the map read finds was in flight then.
	now, err := r.inFlight.Observe(ctx)
	if err != nil {
		return nil, err
	}
	stored, err := r.cfg.Store.ReadStored(ctx)
	if err != nil {
		return nil, err
	}
	unheld, err := r.decode(stored.Data)
	if err != nil {
		return nil, err
	}
	rebuilt, err := r.newSet()
	if err != nil {
		return nil, err
	}
	return &Pass[K]{r: r, stored: stored, now: now, unheld: unheld, rebuilt: rebuilt,
		holders: map[int]*corev1.Service{}, leaks: map[K]leakState{}}, nil
}

// Hold records that svc holds k.
func (p *Pass[K]) Hold(svc *corev1.Service, k K) Outcome {
	slot, ok := p.r.cfg.Space.Index(k)
	switch {
	case !ok:
		return OutOfRange
	case !p.rebuilt.Set(slot):
		return Duplicate
	case p.unheld.Clear(slot):
		return Held
	default:
		p.toSet = append(p.toSet, slot)
		p.holders[slot] = svc
		return Missing
	}
}

// Leak is a key allocated that no Service of the pass holds.
type Leak[K Key] struct {
	Key K
	// Freed says this pass frees it (its LeakPasses-th pass and the leak
	// grace over, and every write in flight then ended); otherwise it is
	// kept and counted.
	Freed bool
	// InFlight says it is kept only because a write that was in flight when
	// its grace ended may still land (Options.InFlight).
	InFlight bool
}

// Leaks returns, in ascending order, the keys allocated that no Service
// holds, once every key held has been given to Hold. It walks the map once;
// a second call returns the same leaks.
func (p *Pass[K]) Leaks() []Leak[K] {
	if p.walked {
		return p.found
	}
	p.walked = true
	p.unheld.ForEach(func(slot int) {
		k := p.r.cfg.Space.Key(slot)
		state, seen := p.r.leaks[k]
		if !seen {
			state = leakState{passesLeft: LeakPasses - 1, firstSeen: p.now}
		}
		if state.passesLeft > 0 || p.now.Sub(state.firstSeen) < p.r.cfg.LeakGrace {
			state.passesLeft = max(state.passesLeft-1, 0)
			p.leaks[k] = state
			p.rebuilt.Set(slot) // keep it for now
			p.found = append(p.found, Leak[K]{Key: k})
			return
		}
		if state.graceOver.IsZero() {
			state.graceOver = p.now
		}
		if !p.r.inFlight.Ended(state.graceOver) {
			p.leaks[k] = state
			p.rebuilt.Set(slot)
			p.found = append(p.found, Leak[K]{Key: k, InFlight: true})
			return
		}
		p.toClear = append(p.toClear, slot)
		p.found = append(p.found, Leak[K]{Key: k, Freed: true})
	})
	return p.found
}

// Allocated is the number of keys the rebuilt map holds.
func (p *Pass[K]) Allocated() int { return p.rebuilt.Used() }

// Result is what Commit did.
type Result[K Key] struct {
	// Wrote says the map was written.
	Wrote bool
	// NotMissing are the keys Hold found Missing that the write did not set:
	// set in a fresh read (by the allocation that stored their Service, so
	// they were not missing), or clear there while their Service, read
	// again, no longer holds them (deleted, and its bit freed, after the
	// list). Their "not allocated" findings are false.
	NotMissing map[K]bool
}

// Commit writes the rebuilt map if it differs from the stored one (merged
// onto a fresh read after a lost compare-and-swap) and then makes the pass's
// leak counts the repairer's. A bitmap.ErrConflict means the pass must be
// rerun (Rounds); nothing is committed then. Commit before Leaks is an
// error: the rebuilt map would lack the leaks still counted.
func (p *Pass[K]) Commit(ctx context.Context) (Result[K], error) {
	if !p.walked {
		return Result[K]{}, errors.New("range repair: Commit before Leaks")
	}
	res := Result[K]{NotMissing: map[K]bool{}}
	data := p.rebuilt.Bytes()
	if !p.stored.Exists() || !bytes.Equal(data, p.stored.Data) {
		wrote, notMissing, err := p.writeMerged(ctx, data)
		if err != nil {
			return Result[K]{}, err
		}
		res.Wrote = wrote
		for slot := range notMissing {
			res.NotMissing[p.r.cfg.Space.Key(slot)] = true
		}
	}
	p.r.leaks = p.leaks
	return res, nil
}

// writeMerged writes the map. The first attempt writes data, the map rebuilt
// from the read the pass started with, with a compare-and-swap on that read's
// revision. After a lost compare the pass's changes are merged onto a fresh
// read instead (see the package doc): held keys are set if missing and their
// Service still holds them, confirmed leaks cleared. Each attempt is one read
// and one compare-and-swap with nothing in between. It returns the slots of
// toSet the merge did not set.
func (p *Pass[K]) writeMerged(ctx context.Context, data []byte) (bool, map[int]bool, error) {
	store := p.r.cfg.Store
	base := p.stored
	notMissing := map[int]bool{}
	held := map[int]bool{} // stillHolds answers, asked at most once per slot
	for attempt := 1; ; attempt++ {
		_, err := store.CompareAndWrite(ctx, data, base)
		if err == nil {
			return true, notMissing, nil
		}
		if !errors.Is(err, bitmap.ErrConflict) || attempt >= MaxMergeAttempts {
			return false, nil, fmt.Errorf("write map of %s: %w", p.r.cfg.Space, err)
		}
		fresh, err := store.ReadStored(ctx)
		if err != nil {
			return false, nil, err
		}
		if !fresh.Exists() {
			// Deleted meanwhile: rebuilding it is a decision for a new pass.
			return false, nil, fmt.Errorf("%s map deleted during the pass: %w", p.r.cfg.Space, bitmap.ErrConflict)
		}
		merged, err := p.r.decode(fresh.Data)
		if err != nil {
			return false, nil, err
		}
		for _, slot := range p.toSet {
			if merged.Has(slot) {
				notMissing[slot] = true
				continue
			}
			ok, checked := held[slot]
			if !checked {
				if ok, err = p.stillHolds(ctx, slot); err != nil {
					return false, nil, err
				}
				held[slot] = ok
			}
			if !ok {
				notMissing[slot] = true
				continue
			}
			delete(notMissing, slot)
			merged.Set(slot)
		}
		for _, slot := range p.toClear {
			merged.Clear(slot) // no longer set: nothing to do
		}
		data = merged.Bytes()
		if bytes.Equal(data, fresh.Data) {
			return false, notMissing, nil
		}
		base = fresh
	}
}

// stillHolds reports whether the Service slot was found on, read again,
// still exists with the same UID and holds its key.
func (p *Pass[K]) stillHolds(ctx context.Context, slot int) (bool, error) {
	svc := p.holders[slot]
	if svc == nil {
		return true, nil
	}
	cur, err := p.r.cfg.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read Service %s/%s again: %w", svc.Namespace, svc.Name, err)
	}
	if cur.UID != svc.UID {
		return false, nil
	}
	return holds(cur, p.r.cfg.Space.Key(slot)), nil
}
