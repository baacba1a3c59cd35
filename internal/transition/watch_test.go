package transition

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/model"
)

// countingWatcher counts the watches opened through it and keeps the
// revision the first one starts at.
type countingWatcher struct {
	clientv3.Watcher
	n     atomic.Int32
	first atomic.Int64
}

func (w *countingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if w.n.Add(1) == 1 {
		w.first.Store(clientv3.OpGet(key, opts...).Rev())
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

// A state written long ago, with etcd's history since still kept, is
// watched from the revision of the read that found it: a watch from the
// state's own revision makes etcd read every write since (a whole
// start-up's history on a long-lived data dir) to find none of the key's.
func TestFirstWatchFromRead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	client := e.Client()
	rev := stateThenOtherWrites(t, ctx, client)
	watched := e.NewClient(t)
	counter := &countingWatcher{Watcher: watched.Watcher}
	watched.Watcher = counter
	c := join(t, ctx, watched, string(model.IPAddress), "second")
	waitFor(t, "the second replica's watch", func() bool { return counter.n.Load() > 0 })
	if from := counter.first.Load(); from <= rev {
		t.Fatalf("the state's first watch starts at revision %d; the read was at %d or later", from, rev)
	}
	if _, err := Resume(ctx, client, prefix, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second replica to see dual write resumed", c.DualWrite)
}

// A state written before etcd's last compaction (every long-running
// cluster's) is watched from the revision of the read that found it, not
// from its own: a watch from its own revision fails at once, every time.
// The replica watches once more after the first failure and then stays on
// that watch, and a later change of the state still reaches it.
func TestWatchAfterCompaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	client := e.Client()
	rev := stateThenOtherWrites(t, ctx, client)
	if _, err := client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	watched := e.NewClient(t)
	counter := &countingWatcher{Watcher: watched.Watcher}
	watched.Watcher = counter
	c := join(t, ctx, watched, string(model.IPAddress), "second")
	if c.DualWrite() {
		t.Fatal("DualWrite on a fresh IPAddress cluster")
	}
	// The retry interval is 500 ms: watching from the compacted revision
	// again would open about six watches in these 3 s.
	time.Sleep(3 * time.Second)
	if n := counter.n.Load(); n > 2 {
		t.Fatalf("%d watches of the state in 3 s after a compaction; want at most 2 (the failed one, then one that lasts)", n)
	}
	if _, err := Resume(ctx, client, prefix, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second replica to see dual write resumed", c.DualWrite)
}

// stateThenOtherWrites has a first replica write the state, then writes 20
// other keys, and returns the revision of the last.
func stateThenOtherWrites(t *testing.T, ctx context.Context, client *clientv3.Client) int64 {
	t.Helper()
	join(t, ctx, client, string(model.IPAddress), "first") // writes the state
	var rev int64
	for i := range 20 {
		resp, err := client.Put(ctx, fmt.Sprintf("/other/%d", i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}
