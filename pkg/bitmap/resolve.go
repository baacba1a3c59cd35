package bitmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// settleWindow bounds how long settleLater goes on after a batch whose
// outcome stayed unknown. It must stay well below the repairs' leak grace
// (repair.DefaultLeakGrace, 90 s): a bit the settle has yet to clear is
// set with no holder, which is what the repair frees after its grace; a
// compensating release after that could clear the bit of the address's next
// holder.
const settleWindow = 30 * time.Second

// ambiguousWrite is a batch's write whose transaction failed after it may
// have landed: the map it was written on (base, and baseValue, that map
// encoded) and the value and stamp it wrote.
type ambiguousWrite struct {
	base      mapState
	baseValue []byte
	value     []byte
	stamp     string
}

// resolution is what resolveWrite learned of an ambiguous write.
type resolution struct {
	landed bool
	// fenced: the map was still base, and the fence wrote base again (at rev,
	// with stamp): the write can never land.
	fenced bool
	rev    int64
	stamp  string
}

// resolveWrite finds out whether w landed. It reads and writes etcd only,
// never the cache, so the leader and settleLater may both call it.
//
//   - If the map is still w.base (revision and stamp), a fence (a CAS writing
//     the base map back) makes sure the write can never land later.
//   - Otherwise the first change after base is read from etcd's history (a
//     watch from base+1). Only one CAS on base can succeed, and it is that
//     first change: the write landed iff it put our value and, at the same
//     revision, our stamp. The value alone does not tell: two instances
//     that picked the same free slot from the same base write the same
//     bytes (likely in a small range), and taking the other's write for
//     ours hands that slot out twice; the stamp is random per write.
//
// An error (etcd unreachable, history compacted) leaves the outcome unknown.
func (a *Store) resolveWrite(ctx context.Context, w ambiguousWrite) (resolution, error) {
	put, stamp := a.putOps(w.baseValue)
	fence, err := a.client.Txn(ctx).
		// the map is still the base the ambiguous write compared against
		If(a.unchanged(w.base)...).
		// write the base map back with a new stamp: the ambiguous write's
		// compare can never succeed after this
		Then(put...).
		// no Else: something changed after base; its history tells whether
		// the first change was ours
		Commit()
	if err != nil {
		return resolution{}, fmt.Errorf("resolve an ambiguous write to %s: fence: %w", a.key, err)
	}
	if fence.Succeeded {
		return resolution{fenced: true, rev: fence.Header.Revision, stamp: stamp}, nil
	}
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	for resp := range a.client.Watch(wctx, a.key, clientv3.WithRev(w.base.rev+1)) {
		if err := resp.Err(); err != nil {
			return resolution{}, fmt.Errorf("resolve an ambiguous write to %s: history: %w", a.key, err)
		}
		if len(resp.Events) == 0 {
			continue
		}
		first := resp.Events[0]
		if first.Type != clientv3.EventTypePut || !bytes.Equal(first.Kv.Value, w.value) {
			return resolution{}, nil
		}
		stamped, err := a.client.Get(ctx, a.stampKey, clientv3.WithRev(first.Kv.ModRevision))
		if err != nil {
			return resolution{}, fmt.Errorf("resolve an ambiguous write to %s: stamp at revision %d: %w", a.key, first.Kv.ModRevision, err)
		}
		if kvs := stamped.Kvs; len(kvs) == 0 || kvs[0].ModRevision != first.Kv.ModRevision || string(kvs[0].Value) != w.stamp {
			return resolution{}, nil // another writer's identical map
		}
		return resolution{landed: true}, nil
	}
	return resolution{}, fmt.Errorf("resolve an ambiguous write to %s: %w", a.key, ctx.Err())
}

// ambiguous answers a batch whose write failed after it may have landed;
// changed are the slots the write changed, applied in the cache. The leader
// resolves it at once, on its own context bounded by MinBatchTime (the
// batch's may be spent, and its members are waiting), and every member
// learns its real outcome. When that cannot tell, the members fail with
// outcomeUnknown and settleLater goes on resolving in the background: if the
// write landed it releases what the write allocated (its callers were told
// it failed), if not it releases again what the write released (its callers
// were told the outcome is unknown, and send nothing again). So an ambiguous
// write leaks nothing unless etcd stays unreachable for settleWindow; and it
// never hands out an address twice.
func (a *Store) ambiguous(batch []*request, changed []int, w ambiguousWrite, cause error) error {
	allocated, released := a.netChange(changed)
	a.revert(changed)
	a.loaded = false
	baseValue, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), a.bits.Bytes())
	if err != nil {
		return &outcomeUnknown{fmt.Errorf("%w; encode %s: %w", cause, a.key, err)}
	}
	w.baseValue = baseValue
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.MinBatchTime)
	defer cancel()
	res, err := a.resolveWrite(ctx, w)
	switch {
	case err != nil:
		a.stats.unresolved.Add(1)
		go a.settleLater(w, allocated, released, settleDeadline(batch))
		return &outcomeUnknown{fmt.Errorf("%w (settling in the background): %w", cause, err)}
	case res.fenced:
		a.rev, a.stamp, a.loaded = res.rev, res.stamp, true
		return cause
	case !res.landed:
		return cause
	}
	for _, slot := range changed { // the cache is our map again
		if !a.bits.Clear(slot) {
			a.bits.Set(slot)
		}
	}
	a.stats.writes.Add(1)
	a.stats.bytesWritten.Add(uint64(len(w.value)))
	a.stats.ambiguousLanded.Add(1)
	a.finish(batch)
	return nil
}

// netChange splits the slots a batch changed (each flip listed, as apply
// records them; a.bits holds them applied) into those the batch set and
// those it cleared, a slot flipped twice being neither.
func (a *Store) netChange(changed []int) (allocated, released []int) {
	flips := make(map[int]int, len(changed))
	for _, slot := range changed {
		flips[slot]++
	}
	for slot, n := range flips {
		switch {
		case n%2 == 0:
		case a.bits.Has(slot):
			allocated = append(allocated, slot)
		default:
			released = append(released, slot)
		}
	}
	return allocated, released
}

// settleDeadline is when the settling of a batch must end: settleWindow from
// now, or sooner when a member is itself a compensating release, whose
// settling must end when its own did.
func settleDeadline(batch []*request) time.Time {
	by := time.Now().Add(settleWindow)
	for _, r := range batch {
		if !r.settleBy.IsZero() && r.settleBy.Before(by) {
			by = r.settleBy
		}
	}
	return by
}

// settleLater resolves w, retrying until by, and then undoes what its
// members were told did not happen: the slots it allocated if it landed,
// the slots it released if not. Nobody else can hold those slots meanwhile:
// they are set in etcd and their callers hold nothing, and the repair frees
// such a bit only after its leak grace, longer than settleWindow.
func (a *Store) settleLater(w ambiguousWrite, allocated, released []int, by time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	var res resolution
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		attempt, stop := context.WithTimeout(ctx, 3*a.opts.MinBatchTime)
		r, err := a.resolveWrite(attempt, w)
		stop()
		if err == nil {
			res = r
			break
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			a.stats.unsettled.Add(1)
			return
		}
		select {
		case <-ctx.Done():
			a.stats.unsettled.Add(1)
			return
		case <-time.After(backoff):
		}
	}
	undo := released
	if res.landed {
		undo = allocated
	}
	for _, slot := range undo {
		if !a.releaseBy(ctx, slot, by) {
			a.stats.unsettled.Add(1)
			return
		}
	}
	a.stats.settled.Add(1)
}

// releaseBy releases slot for settleLater, sending it again after a batch
// error that wrote nothing, until ctx ends. A release whose own outcome is
// unknown is left to the settling of its batch, bounded by the same by.
func (a *Store) releaseBy(ctx context.Context, slot int, by time.Time) bool {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := a.submit(ctx, &request{kind: opRelease, slot: slot, settleBy: by})
		if err == nil || errors.As(err, new(*outcomeUnknown)) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
	}
}
