package bitmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdhistory"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

type opKind uint8

const (
	opAllocate opKind = iota + 1
	opAllocateNext
	opRelease
	opRead
)

// request is one caller's operation inside a batch.
type request struct {
	kind opKind
	slot int               // in: the slot to allocate or release; out: the slot AllocateNext took
	read func(*bitset.Set) // opRead: runs on the confirmed state

	deadline time.Time // the caller's deadline, zero when it has none
	settleBy time.Time // a release settleLater sent: when its settling ends
	err      error     // the operation's own outcome, set by the leader
	done     chan struct{}
	promoted bool // guarded by Store.mu: this caller must lead the next batch
}

// submit queues req and returns when a batch carrying it has committed (or
// failed as a whole; that error is returned and req.err is not used).
//
// Group commit without a background goroutine: the first caller to find no
// batch in flight becomes the leader; it takes every queued request (up to
// MaxBatch), applies them to the cached map, and writes the result in one CAS
// transaction. Callers arriving meanwhile queue up; when the leader is done it
// promotes the oldest queued caller to lead the next batch. A caller whose
// context ends while it is still queued leaves the queue; once its request is
// in a batch it waits for that batch, whose time is bounded by the members'
// deadlines, so an allocation is never applied without its caller learning it.
func (a *Store) submit(ctx context.Context, req *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req.done = make(chan struct{}, 1)
	req.deadline, _ = ctx.Deadline()

	a.mu.Lock()
	a.pending = append(a.pending, req)
	lead := !a.busy
	a.busy = true
	a.mu.Unlock()

	if !lead {
		select {
		case <-req.done:
		case <-ctx.Done():
			a.mu.Lock()
			if i := slices.Index(a.pending, req); i >= 0 && !req.promoted {
				a.pending = slices.Delete(a.pending, i, i+1)
				a.mu.Unlock()
				return ctx.Err()
			}
			a.mu.Unlock()
			<-req.done // in a batch already, or promoted: see it through
		}
		a.mu.Lock()
		lead = req.promoted
		a.mu.Unlock()
		if !lead {
			return req.batchErr()
		}
	}

	for {
		a.mu.Lock()
		n := min(len(a.pending), a.opts.MaxBatch)
		batch := slices.Clone(a.pending[:n])
		a.pending = slices.Delete(a.pending, 0, n)
		a.mu.Unlock()

		batchErr := settledError(a.commit(batch))
		for _, r := range batch {
			if batchErr != nil {
				r.err = &batchError{err: batchErr}
			}
			if r != req {
				r.done <- struct{}{}
			}
		}

		a.mu.Lock()
		if len(a.pending) == 0 {
			a.busy = false
			a.mu.Unlock()
			break
		}
		if slices.Contains(batch, req) {
			// Our own request is done: hand leadership to the oldest waiter.
			next := a.pending[0]
			next.promoted = true
			a.mu.Unlock()
			next.done <- struct{}{}
			break
		}
		// We were promoted but the batch cap left our request queued: go on.
		a.mu.Unlock()
	}
	return req.batchErr()
}

// outcomeUnknown is a commit error after which the batch's write may have
// landed: resolveWrite could not tell within the batch. settleLater goes on
// finding out, and undoes what the members were told did not happen.
type outcomeUnknown struct{ err error }

func (e *outcomeUnknown) Error() string { return e.err.Error() }
func (e *outcomeUnknown) Unwrap() error { return e.err }

// settledError is commit's error as the batch's requests get it: one after
// which nothing of the batch was applied is allocation.Retriable (a release
// may be sent again), one whose outcome is unknown is not. Nor is a refusal
// because etcd was restored under the server (internal/etcdhistory): no write of
// this process can be applied any more, and it is stopping.
func settledError(err error) error {
	var unknown *outcomeUnknown
	if err == nil || errors.As(err, &unknown) || errors.Is(err, etcdhistory.ErrRestored) {
		return err
	}
	return allocation.Retriable(err)
}

// batchError marks a failure of the whole batch, as opposed to the request's
// own outcome (ErrAllocated, ErrFull).
type batchError struct{ err error }

func (e *batchError) Error() string { return e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

func (r *request) batchErr() error {
	var be *batchError
	if errors.As(r.err, &be) {
		r.err = nil
		return be.err
	}
	return nil
}

// batchContext bounds a batch by the latest deadline of its members, capped by
// RequestTimeout and never shorter than MinBatchTime: a caller with a short
// deadline does not cut short the others, and a batch of callers with very
// short deadlines still gets the time an etcd round trip needs. Without the
// floor, callers with 0–3 ms deadlines make nearly every write time out after
// it may have landed, and a /24 leaks in seconds. A
// member whose own deadline passes meanwhile waits for the batch (see
// submit), so it learns its real outcome instead of leaking it.
func (a *Store) batchContext(batch []*request) (context.Context, context.CancelFunc) {
	now := time.Now()
	limit := now.Add(a.opts.RequestTimeout)
	var latest time.Time
	for _, r := range batch {
		if r.deadline.IsZero() {
			latest = limit
			break
		}
		if r.deadline.After(latest) {
			latest = r.deadline
		}
	}
	if floor := now.Add(a.opts.MinBatchTime); latest.Before(floor) {
		latest = floor
	}
	if latest.After(limit) {
		latest = limit
	}
	return context.WithDeadline(context.Background(), latest)
}

// commit applies batch to the cached map and writes it with one CAS
// transaction, retrying on conflicts from fresh state. It returns an error
// only when the batch failed as a whole; then nothing of it is applied. When
// etcd fails ambiguously (the write may have landed), ambiguous (resolve.go) finds out what
// happened and each member is told its real outcome.
func (a *Store) commit(batch []*request) error {
	ctx, cancel := a.batchContext(batch)
	defer cancel()
	a.stats.batches.Add(1)
	a.stats.requests.Add(uint64(len(batch)))

	for attempt := 1; ; attempt++ {
		if !a.loaded {
			if err := a.load(ctx); err != nil {
				return err
			}
		}
		changed := a.apply(batch)

		base := mapState{rev: a.rev, stamp: a.stamp}
		txn := a.client.Txn(ctx).
			// the map and its stamp are still those the cache was built
			// from; for a batch that changed nothing this is the whole
			// transaction, and its success confirms the cache's answers
			If(a.unchanged(base)...)
		var value []byte
		var stamp string
		if len(changed) > 0 {
			var err error
			value, err = etcdlayout.EncodeRangeAllocation(a.space.Spec(), a.bits.Bytes())
			if err != nil {
				a.revert(changed)
				return fmt.Errorf("encode %s: %w", a.key, err)
			}
			var put []clientv3.Op
			put, stamp = a.putOps(value)
			// write the new map with a fresh stamp
			txn = txn.Then(put...)
		}
		resp, err := txn.
			// fresh state (map and stamp at one revision) for the retry
			Else(a.readOps()...).
			Commit()
		if err != nil {
			err = fmt.Errorf("etcd transaction on %s: %w", a.key, err)
			if len(changed) == 0 {
				a.loaded = false
				return err
			}
			// The write may or may not have landed.
			return a.ambiguous(batch, changed, ambiguousWrite{base: base, value: value, stamp: stamp}, err)
		}
		if resp.Succeeded {
			if len(changed) > 0 {
				a.rev, a.stamp = resp.Header.Revision, stamp
				a.stats.writes.Add(1)
				a.stats.bytesWritten.Add(uint64(len(value)))
			}
			a.finish(batch)
			return nil
		}

		a.stats.conflicts.Add(1)
		if err := a.restore(stateOf(resp.Responses[0], resp.Responses[1])); err != nil {
			return err
		}
		if attempt >= a.opts.MaxAttempts {
			return fmt.Errorf("%s: gave up after %d conflicting writes", a.key, attempt)
		}
		// Retry at once: the Else branch returned the freshest state there is,
		// and a wait would only let it go stale again. Only a long losing
		// streak pauses for a random moment (so instances that keep colliding
		// fall out of step) and then re-reads. The attempt bound and the
		// batch deadline keep a starved instance from spinning forever.
		if attempt%8 == 0 {
			pause := time.Duration(a.random.Int64N(int64(2 * time.Millisecond)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
			}
			a.loaded = false
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", a.key, err)
		}
	}
}

// load reads the map from etcd into the cache.
func (a *Store) load(ctx context.Context) error {
	resp, err := a.client.Txn(ctx).
		// no compare: the map and its stamp, read at one revision
		Then(a.readOps()...).
		Commit()
	if err != nil {
		return fmt.Errorf("read %s: %w", a.key, err)
	}
	return a.restore(stateOf(resp.Responses[0], resp.Responses[1]))
}

// restore replaces the cache with the map as a read saw it; a missing map is
// allocation.ErrAllocationDisabled.
func (a *Store) restore(s mapState) error {
	a.loaded = false
	if !s.exists() {
		return fmt.Errorf("%s: %w", a.key, allocation.ErrAllocationDisabled)
	}
	_, data, err := a.decode(s.value)
	if err != nil {
		return err
	}
	if err := a.bits.SetBytes(data); err != nil {
		return fmt.Errorf("value at %s: %w", a.key, err)
	}
	a.rev, a.stamp, a.loaded = s.rev, s.stamp, true
	return nil
}

// apply runs every request of batch against the cache, in order, and returns
// the slots it changed (so a failed write can be reverted). Requests learn
// their own outcome in r.err and r.slot.
func (a *Store) apply(batch []*request) []int {
	var changed []int
	for _, r := range batch {
		r.err = nil
		switch r.kind {
		case opAllocate:
			if a.bits.Set(r.slot) {
				changed = append(changed, r.slot)
			} else {
				r.err = allocation.ErrAllocated
			}
		case opAllocateNext:
			slot, ok := a.bits.NextDynamic()
			if !ok {
				r.err = allocation.ErrFull
				continue
			}
			a.bits.Set(slot)
			r.slot = slot
			changed = append(changed, slot)
		case opRelease:
			if a.bits.Clear(r.slot) {
				changed = append(changed, r.slot)
			}
		}
	}
	return changed
}

// revert undoes apply's changes: each changed slot flips back.
func (a *Store) revert(changed []int) {
	for _, slot := range slices.Backward(changed) {
		if !a.bits.Clear(slot) {
			a.bits.Set(slot)
		}
	}
}

// finish runs the read requests on the confirmed state.
func (a *Store) finish(batch []*request) {
	for _, r := range batch {
		if r.kind == opRead {
			r.read(a.bits)
		}
	}
}
