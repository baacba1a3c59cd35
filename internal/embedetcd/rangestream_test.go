package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestInProcessRangeStream: a streaming range in process returns the keys a
// Range returns, in order, over several chunks, with the count of every
// key in range and the revision it read at on its last chunk; a limited
// stream stops at its limit; a caller may clear the chunks' entries as it
// reads them, as k8s.io/apiserver does; a caller that goes away ends the
// stream, and so does a compaction past its revision, with etcd's error;
// a closed client refuses it.
func TestInProcessRangeStream(t *testing.T) {
	t.Parallel()
	ctx, s, c := inProcessMember(t)

	const n = 3000
	value := strings.Repeat("v", 1024) // 3 MB in all: more than one chunk
	var want []string
	for i := range n {
		key := fmt.Sprintf("/s/%05d", i)
		if _, err := c.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	if _, err := c.Put(ctx, "/t/outside", "x"); err != nil {
		t.Fatal(err)
	}
	end := clientv3.GetPrefixRangeEnd("/s/")

	stream := func(ctx context.Context, opts ...clientv3.OpOption) (keys []string, chunks int, last *clientv3.RangeStreamResponse) {
		t.Helper()
		ch, err := c.KV.GetStream(ctx, "/s/", append([]clientv3.OpOption{clientv3.WithRange(end)}, opts...)...)
		if err != nil {
			t.Fatalf("GetStream: %v", err)
		}
		for r := range ch {
			if err := r.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			chunks++
			for i, kv := range r.RangeResponse.Kvs {
				keys = append(keys, string(kv.Key))
				// k8s.io/apiserver's watch clears each entry once decoded;
				// the handler must not be reading the same slice (-race).
				r.RangeResponse.Kvs[i] = nil
			}
			last = &r
		}
		return keys, chunks, last
	}

	keys, chunks, last := stream(ctx)
	if !slices.Equal(keys, want) {
		t.Fatalf("streamed %d keys, want the %d of the prefix in order", len(keys), len(want))
	}
	if chunks < 2 {
		t.Errorf("%d chunk(s): want the stream cut in several", chunks)
	}
	got, err := c.Get(ctx, "/s/", clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if h := last.RangeResponse.Header; h == nil || h.Revision != got.Header.Revision || last.RangeResponse.Count != n {
		t.Errorf("last chunk: header %v, count %d; want revision %d, count %d", h, last.RangeResponse.Count, got.Header.Revision, n)
	}

	keys, _, last = stream(ctx, clientv3.WithLimit(100))
	if !slices.Equal(keys, want[:100]) || !last.RangeResponse.More || last.RangeResponse.Count != n {
		t.Errorf("limited to 100: %d keys, more %v, count %d; want the first 100, more, count %d",
			len(keys), last.RangeResponse.More, last.RangeResponse.Count, n)
	}

	// The caller goes away after the first chunk: the stream ends with an error.
	gone, stop := context.WithCancel(ctx)
	ch, err := c.KV.GetStream(gone, "/s/", clientv3.WithRange(end))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	stop()
	var ended bool
	for r := range ch {
		if r.Err() != nil {
			ended = true
		}
	}
	if !ended {
		t.Error("a stream whose caller went away ended without an error")
	}

	// A compaction past the stream's revision, between two chunks: the
	// stream ends with etcd's error, not as if the range were read.
	ch, err = c.KV.GetStream(ctx, "/s/", clientv3.WithRange(end))
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	resp, err := c.Put(ctx, "/t/later", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	streamed, failed := len(first.RangeResponse.Kvs), error(nil)
	for r := range ch {
		if failed = r.Err(); failed != nil {
			break
		}
		streamed += len(r.RangeResponse.Kvs)
	}
	for range ch {
	}
	if !errors.Is(failed, rpctypes.ErrCompacted) {
		t.Errorf("a stream compacted after its first chunk ended with %v after %d keys, want %v", failed, streamed, rpctypes.ErrCompacted)
	}

	c2 := s.InProcessClient()
	c2.Close()
	if _, err := c2.KV.GetStream(ctx, "/s/", clientv3.WithRange(end)); err == nil {
		t.Error("a closed client's stream did not fail")
	}
}

// inProcessMember starts a member in a temporary dir and returns a context
// bounded by a minute, the member and an in-process client of it, all
// closed when the test ends.
func inProcessMember(t testing.TB) (context.Context, *Server, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := s.InProcessClient()
	t.Cleanup(func() { c.Close() })
	return ctx, s, c
}
