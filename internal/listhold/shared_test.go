package listhold

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

var layout = etcdlayout.Layout{Prefix: "/registry"}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// writes puts n keys and returns the revision of the last.
func writes(t *testing.T, ctx context.Context, c *clientv3.Client, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		resp, err := c.Put(ctx, fmt.Sprintf("/test/key-%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// readableAt reports whether etcd still answers a read at rev.
func readableAt(t *testing.T, ctx context.Context, c *clientv3.Client, rev int64) bool {
	t.Helper()
	_, err := c.Get(ctx, "/test/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	switch {
	case err == nil:
		return true
	case errors.Is(err, rpctypes.ErrCompacted):
		return false
	default:
		t.Fatalf("read at revision %d: %v", rev, err)
		return false
	}
}

// TestGuardCompactsNoFurtherThanTheHold: a compaction past a held revision
// stops at it, the held revision stays readable and the ones before it do
// not; once nothing is held, the compaction goes where it was asked to.
func TestGuardCompactsNoFurtherThanTheHold(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := etcdtest.New(t).Client()
	held := writes(t, ctx, c, 5)
	later := writes(t, ctx, c, 5)

	holds := NewHolds(Limits{Idle: time.Hour, MaxAge: time.Hour}, nil)
	holds.Touch(held)
	kv := NewShared(c, layout, "a", holds, 0).Guard(c.KV)
	if _, err := kv.Compact(ctx, later); err != nil {
		t.Fatalf("compact with a hold: %v", err)
	}
	if !readableAt(t, ctx, c, held) {
		t.Fatalf("revision %d held, and compacted", held)
	}
	if readableAt(t, ctx, c, held-1) {
		t.Errorf("revision %d before the hold not compacted", held-1)
	}
	// Compacted up to the hold already: the next compaction has nothing
	// to do, and says so without an error.
	if _, err := kv.Compact(ctx, later); err != nil {
		t.Errorf("compact again with the same hold: %v", err)
	}

	free := NewShared(c, layout, "b", NewHolds(Limits{}, nil), 0).Guard(c.KV)
	if _, err := free.Compact(ctx, later); err != nil {
		t.Fatalf("compact without a hold: %v", err)
	}
	if readableAt(t, ctx, c, held) {
		t.Errorf("revision %d no longer held, and not compacted", held)
	}
	// Asked for a revision compacted already, with no hold: etcd's error,
	// as without the guard.
	if _, err := free.Compact(ctx, held); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("compact to a compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
}

// TestHoldsAcrossServers: a hold one server publishes stops the compaction
// another makes, and ends when its server withdraws it.
func TestHoldsAcrossServers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	c := e.Client()
	held := writes(t, ctx, c, 5)

	lister := NewShared(e.NewClient(t), layout, "lister", NewHolds(Limits{Idle: time.Hour, MaxAge: time.Hour}, nil), time.Second)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); lister.Run(runCtx) }()
	lister.Holds().Touch(held)

	compactor := NewShared(c, layout, "compactor", NewHolds(Limits{}, nil), 0)
	waitFloor(t, ctx, compactor, held)
	later := writes(t, ctx, c, 5)
	if _, err := compactor.Guard(c.KV).Compact(ctx, later); err != nil {
		t.Fatal(err)
	}
	if !readableAt(t, ctx, c, held) {
		t.Fatalf("revision %d held by another server, and compacted", held)
	}

	// Kept alive past its lease's TTL of a second.
	time.Sleep(2500 * time.Millisecond)
	waitFloor(t, ctx, compactor, held)

	stop()
	<-done
	waitFloor(t, ctx, compactor, 0)
}

// TestHoldEndsWithItsServer: a server that dies without withdrawing its
// hold (its client gone, as when the process is killed) holds nothing once
// its lease's TTL has passed.
func TestHoldEndsWithItsServer(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	held := writes(t, ctx, e.Client(), 3)

	dying := e.NewClient(t)
	s := NewShared(dying, layout, "dying", NewHolds(Limits{Idle: time.Hour, MaxAge: time.Hour}, nil), time.Second)
	s.Holds().Touch(held)
	if err := s.publish(ctx); err != nil {
		t.Fatal(err)
	}
	other := NewShared(e.Client(), layout, "other", NewHolds(Limits{}, nil), 0)
	waitFloor(t, ctx, other, held)
	if err := dying.Close(); err != nil {
		t.Fatal(err)
	}
	waitFloor(t, ctx, other, 0)
}

// TestRunPublishesAgainAfterItsLeaseIsLost: a hold whose lease etcd no
// longer has (revoked, or expired while etcd was out of reach) is
// published again on a new one.
func TestRunPublishesAgainAfterItsLeaseIsLost(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	e := etcdtest.New(t)
	c := e.Client()
	held := writes(t, ctx, c, 3)
	s := NewShared(e.NewClient(t), layout, "a", NewHolds(Limits{Idle: time.Hour, MaxAge: time.Hour}, nil), time.Second)
	s.Holds().Touch(held)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(runCtx) }()
	defer func() { stop(); <-done }()

	other := NewShared(c, layout, "b", NewHolds(Limits{}, nil), 0)
	waitFloor(t, ctx, other, held)
	resp, err := c.Get(ctx, layout.ListHold("a"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the published hold: %v, %d keys", err, len(resp.Kvs))
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	waitFloor(t, ctx, other, held)
	resp, err = c.Get(ctx, layout.ListHold("a"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the hold published again: %v, %d keys", err, len(resp.Kvs))
	}
}

// waitFloor polls s.Floor until it is want (0: nothing held), for up to
// 10 s.
func waitFloor(t *testing.T, ctx context.Context, s *Shared, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		floor, held, err := s.Floor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if (want == 0 && !held) || (held && floor == want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("floor %d (held %v), want %d", floor, held, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
