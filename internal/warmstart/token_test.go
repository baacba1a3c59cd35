package warmstart

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
)

const markKey = "/registry/clusterip-allocator/warm-start"

// TestTokenCheck: a Token matches the etcd its shutdown marked, at a
// version not compacted, and no other: not after another mark, not
// without its key, not past a compaction, not at a version after the
// mark, and not on an etcd restored from a backup taken before the mark,
// even one whose revision was bumped past it.
func TestTokenCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	kv := e.Client()
	put := func(key string) int64 {
		t.Helper()
		resp, err := kv.Put(ctx, key, "v")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put("/registry/services/specs/ns/a")
	snapshot := e.Snapshot(t, ctx)
	rv := strconv.FormatInt(put("/registry/services/specs/ns/b"), 10)
	tok, err := Mark(ctx, kv, markKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Check(ctx, kv, markKey, rv); err != nil {
		t.Fatalf("the mark's own etcd: %v", err)
	}
	stale := func(what string, tok Token, rv string) {
		t.Helper()
		if err := tok.Check(ctx, kv, markKey, rv); !errors.Is(err, ErrStale) {
			t.Errorf("%s: %v, want ErrStale", what, err)
		}
	}
	stale("a version after the mark", tok, strconv.FormatInt(tok.Revision+1, 10))
	stale("no version", tok, "")
	stale("another ID", Token{ID: "other", Revision: tok.Revision}, rv)
	stale("another revision", Token{ID: tok.ID, Revision: tok.Revision + 1}, rv)

	next, err := Mark(ctx, kv, markKey)
	if err != nil {
		t.Fatal(err)
	}
	stale("an earlier mark", tok, rv)
	if err := next.Check(ctx, kv, markKey, rv); err != nil {
		t.Errorf("the later mark: %v", err)
	}
	if _, err := kv.Compact(ctx, next.Revision); err != nil {
		t.Fatal(err)
	}
	stale("compacted past its version", next, rv)
	if err := next.Check(ctx, kv, markKey, strconv.FormatInt(next.Revision, 10)); err != nil {
		t.Errorf("at the compacted revision itself: %v", err)
	}

	// The snapshot was taken before any mark; bumped, its revisions pass
	// the mark's, as an operator's restore of a Kubernetes etcd does.
	e.RestoreSnapshot(t, snapshot, etcdtest.SnapshotRestore{RevisionBump: 1000})
	kv = e.Client()
	stale("an etcd restored from before the mark", next, rv)
}
