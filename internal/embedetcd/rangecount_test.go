package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pagedStream reads one page of [start, end) as k8s.io/apiserver does: a
// limited stream at rev (0: the latest). It returns the page's keys, its
// last chunk's Count and More, and the revision the page was read at.
func pagedStream(ctx context.Context, t testing.TB, c *clientv3.Client, start, end string, rev, limit int64) (keys []string, count int64, more bool, readAt int64, err error) {
	t.Helper()
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	ch, err := c.KV.GetStream(ctx, start, opts...)
	if err != nil {
		return nil, 0, false, 0, err
	}
	for r := range ch {
		if err := r.Err(); err != nil {
			for range ch {
			}
			return keys, 0, false, 0, err
		}
		for _, kv := range r.RangeResponse.Kvs {
			keys = append(keys, string(kv.Key))
		}
		if h := r.RangeResponse.Header; h != nil {
			count, more, readAt = r.RangeResponse.Count, r.RangeResponse.More, h.Revision
		}
	}
	return keys, count, more, readAt, nil
}

// TestCountedPages: the pages of a list read at one revision, each a
// stream from the key after the last page's, return the keys and the
// counts etcd's own count returns (every key from the page's start at that
// revision), while keys are added and deleted between the pages; every
// page after the first is read without etcd's count; a page whose start
// nobody kept is counted by etcd; a page at a compacted revision gets
// etcd's error.
func TestCountedPages(t *testing.T) {
	t.Parallel()
	ctx, s, c := inProcessMember(t)

	const n = 2500
	var want []string
	for i := range n {
		key := fmt.Sprintf("/p/%05d", i)
		if _, err := c.Put(ctx, key, fmt.Sprintf("value %d", i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	end := clientv3.GetPrefixRangeEnd("/p/")

	// etcdCount is etcd's own count of the keys in [from, end) at rev.
	etcdCount := func(from string, rev int64) int64 {
		t.Helper()
		resp, err := c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}

	const limit = 300
	var got []string
	start, rev := "/p/", int64(0)
	for page := 0; ; page++ {
		if page > 0 {
			if _, ok := s.counts.lookup(pageStart{key: start, end: end, rev: rev}); !ok {
				t.Fatalf("page %d from %q at %d: no count kept, etcd would count it", page, start, rev)
			}
		}
		keys, count, more, readAt, err := pagedStream(ctx, t, c, start, end, rev, limit)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if rev == 0 {
			rev = readAt
		}
		if wantCount := etcdCount(start, rev); count != wantCount {
			t.Errorf("page %d from %q: count %d, etcd counts %d", page, start, count, wantCount)
		}
		got = append(got, keys...)
		if !more {
			break
		}
		if page > n/limit {
			t.Fatalf("%d pages of %d keys and more still: want %d keys", page+1, limit, n)
		}
		start = keys[len(keys)-1] + "\x00"
		// Between the pages: a key added in the range, the next page's
		// first key deleted. The list, read at its revision, sees neither.
		if _, err := c.Put(ctx, fmt.Sprintf("/p/%05d-later", page*limit), "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(ctx, want[len(got)]); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %d keys, want the %d at the list's revision in order", len(got), len(want))
	}

	// A page from a start nobody kept (a page size changed by the caller's
	// own rule) is etcd's: counted by its handler, the same count.
	from := want[1234]
	keys, count, _, _, err := pagedStream(ctx, t, c, from, end, rev, limit)
	if err != nil || len(keys) != limit || keys[0] != from || count != etcdCount(from, rev) {
		t.Errorf("page from an unkept start: %d keys from %v, count %d, err %v; want %d from %s, count %d",
			len(keys), first(keys), count, err, limit, from, etcdCount(from, rev))
	}

	// The list's revision compacted: a kept page start gets etcd's error.
	next := want[limit-1] + "\x00"
	if _, ok := s.counts.lookup(pageStart{key: next, end: end, rev: rev}); !ok {
		t.Fatal("the second page's start is no longer kept")
	}
	// The caller of a kept page goes away after its first chunk: the page
	// ends with an error, not as if it had been read.
	gone, stop := context.WithCancel(ctx)
	ch, err := c.KV.GetStream(gone, next, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(n))
	if err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.Err() != nil || r.RangeResponse.Header != nil {
		t.Fatalf("a kept page's first chunk: err %v, last %v; want a chunk with more to come", r.Err(), r.RangeResponse.Header != nil)
	}
	stop()
	var ended bool
	for r := range ch {
		ended = ended || r.Err() != nil
	}
	if !ended {
		t.Error("a kept page whose caller went away ended without an error")
	}

	resp, err := c.Put(ctx, "/q/later", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := pagedStream(ctx, t, c, next, end, rev, limit); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a kept page at a compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
}

func first(keys []string) string {
	if len(keys) == 0 {
		return "nothing"
	}
	return keys[0]
}

// TestRangeCountsBound: the table keeps at most maxPageStarts starts, the
// oldest pushed out first, and a start kept again keeps its place.
func TestRangeCountsBound(t *testing.T) {
	t.Parallel()
	c := newRangeCounts()
	at := func(i int) pageStart { return pageStart{key: fmt.Sprint(i), end: "z", rev: 7} }
	for i := range maxPageStarts + 10 {
		c.keep(at(i), int64(i))
		c.keep(at(0), 0) // kept again: not a new entry
	}
	if len(c.counts) != maxPageStarts || len(c.order) != maxPageStarts {
		t.Fatalf("%d counts, %d in order; want %d", len(c.counts), len(c.order), maxPageStarts)
	}
	for i := 1; i <= 10; i++ {
		if _, ok := c.lookup(at(i)); ok {
			t.Errorf("start %d kept; want the oldest pushed out", i)
		}
	}
	if n, ok := c.lookup(at(maxPageStarts + 9)); !ok || n != maxPageStarts+9 {
		t.Errorf("the newest start: %d, %v", n, ok)
	}
}

// BenchmarkPagedList reads 50,000 keys in pages of 500 (kubectl's), each page at the
// list's revision from the key after the last, as k8s.io/apiserver pages a
// list: streamed (the pages after the first counted once, rangecount.go)
// against unary Range pages, each of which etcd counts to the range's end.
func BenchmarkPagedList(b *testing.B) {
	ctx, _, c := inProcessMember(b)
	const n, limit, batch = 50_000, 500, 100
	value := string(make([]byte, 600)) // about a stored Service
	for i := 0; i < n; i += batch {
		var puts []clientv3.Op
		for j := i; j < i+batch; j++ {
			puts = append(puts, clientv3.OpPut(fmt.Sprintf("/b/%06d", j), value))
		}
		if _, err := c.Txn(ctx).Then(puts...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	end := clientv3.GetPrefixRangeEnd("/b/")
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start, rev, read := "/b/", int64(0), 0
			for {
				keys, _, more, readAt, err := pagedStream(ctx, b, c, start, end, rev, limit)
				if err != nil {
					b.Fatal(err)
				}
				read += len(keys)
				if !more {
					break
				}
				if rev == 0 {
					rev = readAt
				}
				start = keys[len(keys)-1] + "\x00"
			}
			if read != n {
				b.Fatalf("read %d keys, want %d", read, n)
			}
		}
	})
	b.Run("range", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start, rev, read := "/b/", int64(0), 0
			for {
				opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
				if rev > 0 {
					opts = append(opts, clientv3.WithRev(rev))
				}
				resp, err := c.Get(ctx, start, opts...)
				if err != nil {
					b.Fatal(err)
				}
				read += len(resp.Kvs)
				if !resp.More {
					break
				}
				rev = resp.Header.Revision
				start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			if read != n {
				b.Fatalf("read %d keys, want %d", read, n)
			}
		}
	})
}
