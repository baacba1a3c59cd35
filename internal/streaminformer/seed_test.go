package streaminformer

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// seedOf is a SeedFunc of objs at rv.
func seedOf(rv string, objs ...any) SeedFunc {
	return func(context.Context) ([]any, string, bool) { return objs, rv, true }
}

// TestSeedThenWatch: a seeded informer stores the seed and hands it to the
// handlers as initial adds, watches from the seed's version without
// initial events, asks for progress until a bookmark comes, and has synced
// at that bookmark, the changes before it applied.
func TestSeedThenWatch(t *testing.T) {
	t.Parallel()
	src, inf, rec, reg := recorded(t)
	var asked atomic.Int32
	if err := inf.SetSeed(seedOf("9", svc("a", "5"), svc("b", "7")), func(context.Context) error {
		asked.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	w := src.next()
	start(t, inf)
	eventually(t, "progress asked for", func() bool { return asked.Load() >= 2 })
	w.Modify(svc("a", "10"))
	w.Add(svc("c", "11"))
	if inf.HasSynced() || reg.HasSynced() {
		t.Fatal("synced before the bookmark")
	}
	w.Action(watch.Bookmark, svc("", "12"))
	eventually(t, "the handler synced", reg.HasSynced)
	if !inf.HasSynced() || inf.LastSyncResourceVersion() != "12" {
		t.Fatalf("informer synced %v at %q", inf.HasSynced(), inf.LastSyncResourceVersion())
	}
	n := asked.Load()
	w.Delete(svc("b", "13"))
	eventually(t, "the delete handled", func() bool { return len(rec.events()) == 5 })
	want := []string{"add a@5 initial=true", "add b@7 initial=true", "update a@5 -> a@10", "add c@11 initial=true", "delete b@13"}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a@10", "c@11"}, storeContents(inf)); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	opts := src.options()
	if len(opts) != 1 || opts[0].SendInitialEvents != nil || opts[0].ResourceVersion != "9" || !opts[0].AllowWatchBookmarks {
		t.Errorf("watch options %+v, want one watch from 9 with bookmarks and no initial events", opts)
	}
	if got := asked.Load(); got > n+1 {
		t.Errorf("progress asked for %d times after the sync, want none but one in flight", got-n)
	}
}

// TestSeedCompacted: a seed whose version the source no longer has (410)
// is listed over: the list's objects replace the seed's, and what the list
// lacks is deleted, each a change the handlers get.
func TestSeedCompacted(t *testing.T) {
	t.Parallel()
	src, inf, rec, reg := recorded(t)
	if err := inf.SetSeed(seedOf("9", svc("a", "5"), svc("b", "7")), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	gone := src.next()
	list := src.next()
	start(t, inf)
	gone.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	list.Add(svc("a", "20"))
	list.Add(svc("c", "21"))
	list.Action(watch.Bookmark, endOfList("22"))
	eventually(t, "the handler synced", reg.HasSynced)
	if diff := cmp.Diff([]string{"a@20", "c@21"}, storeContents(inf)); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	want := []string{"add a@5 initial=true", "add b@7 initial=true", "update a@5 -> a@20", "add c@21 initial=true", "delete tombstone(b@7)"}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	opts := src.options()
	if len(opts) != 2 || opts[0].ResourceVersion != "9" || opts[1].SendInitialEvents == nil {
		t.Errorf("watch options %+v, want a watch from 9, then a list", opts)
	}
}

// TestNoSeed: a SeedFunc that has none leaves the informer to list.
func TestNoSeed(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	none := func(context.Context) ([]any, string, bool) { return nil, "", false }
	if err := inf.SetSeed(none, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	w := src.next()
	start(t, inf)
	w.Add(svc("a", "5"))
	w.Action(watch.Bookmark, endOfList("9"))
	eventually(t, "synced", inf.HasSynced)
	if opts := src.options(); len(opts) != 1 || opts[0].SendInitialEvents == nil {
		t.Errorf("watch options %+v, want a list", opts)
	}
}

// TestSnapshot: a stopped informer's store and version are one state after
// a list, after a seed, and after the watch's changes; not before Run has
// returned, nor when it returned in the middle of a list.
func TestSnapshot(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, inf *Informer, feed func()) (objs []string, rv string, ok bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		feed()
		if _, _, ok := inf.Snapshot(); ok {
			t.Error("a snapshot of a running informer")
		}
		cancel()
		<-done
		all, rv, ok := inf.Snapshot()
		for _, obj := range all {
			objs = append(objs, describe(obj))
		}
		return objs, rv, ok
	}
	t.Run("after a list and changes", func(t *testing.T) {
		src := newFakeSource()
		inf := New(src, "Service", cache.Indexers{})
		w := src.next()
		objs, rv, ok := run(t, inf, func() {
			w.Add(svc("a", "5"))
			w.Action(watch.Bookmark, endOfList("9"))
			w.Add(svc("b", "10"))
			eventually(t, "the add", func() bool { return inf.LastSyncResourceVersion() == "10" })
		})
		if !ok || rv != "10" || len(objs) != 2 {
			t.Errorf("snapshot %v at %q (ok %v), want a@5 and b@10 at 10", objs, rv, ok)
		}
	})
	t.Run("after a seed", func(t *testing.T) {
		src := newFakeSource()
		inf := New(src, "Service", cache.Indexers{})
		if err := inf.SetSeed(seedOf("9", svc("a", "5")), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		src.next()
		objs, rv, ok := run(t, inf, func() {
			eventually(t, "the seed", func() bool { return len(inf.GetStore().ListKeys()) == 1 })
		})
		if !ok || rv != "9" || len(objs) != 1 {
			t.Errorf("snapshot %v at %q (ok %v), want a@5 at 9", objs, rv, ok)
		}
	})
	t.Run("in the middle of a list", func(t *testing.T) {
		src := newFakeSource()
		inf := New(src, "Service", cache.Indexers{})
		w := src.next()
		_, _, ok := run(t, inf, func() {
			w.Add(svc("a", "5"))
			eventually(t, "the first object", func() bool { return len(inf.GetStore().ListKeys()) == 1 })
		})
		if ok {
			t.Error("a snapshot of a list cut short")
		}
	})
}

// TestSetSeedAfterRun: a started informer takes no seed.
func TestSetSeedAfterRun(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	src.next()
	start(t, inf)
	eventually(t, "the watch", func() bool { return len(src.options()) == 1 })
	if err := inf.SetSeed(seedOf("1"), nil); err == nil {
		t.Error("a running informer took a seed")
	}
}

// BenchmarkSeed seeds an informer with one handler from 100,000 Services
// and waits until it has synced and the handler has taken them all.
func BenchmarkSeed(b *testing.B) {
	const n = 100_000
	objs := make([]any, n)
	for i := range objs {
		objs[i] = svc("s-"+strconv.Itoa(i), strconv.Itoa(i+1))
	}
	b.ReportAllocs()
	for b.Loop() {
		src := newFakeSource()
		inf := New(src, "Service", cache.Indexers{})
		var added atomic.Int32
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { added.Add(1) }}); err != nil {
			b.Fatal(err)
		}
		if err := inf.SetSeed(seedOf(strconv.Itoa(n+1), objs...), func(context.Context) error { return nil }); err != nil {
			b.Fatal(err)
		}
		w := src.next()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		w.Action(watch.Bookmark, svc("", strconv.Itoa(n+2)))
		for !inf.HasSynced() || added.Load() < n {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
	}
}
