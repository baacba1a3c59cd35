package embedetcd

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/txn"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
)

// The pages of a list are counted once.
//
// A limited RangeStream that stops short of its range's end reports how
// many keys the range holds from its start (its Count), and etcd's handler
// counts the keys after its last one for that: a walk of the key index
// from there to the range's end. k8s.io/apiserver reads each page of a
// paged list (kubectl's, the repair job's) as such a stream, from the key
// after the previous page's last, at the revision the first page read, so
// the pages of n keys walk the index about n²/(2·page) times: a list of a
// million Services in pages of 500 would walk it a billion times.
//
// At a fixed revision the keys of a range never change. So when a page
// ends, the keys after its last one are what its Count says less what it
// returned; rangeCounts keeps that number under the next page's start (its
// key, the range's end, the revision), and a stream that starts there at
// that revision is read without etcd's walk (streamCounted): its Count is
// the number kept. A stream at the latest revision (a list's first page),
// one whose start nobody kept, or one that asks for what etcd's handler
// alone does (keys only, a count only) goes to etcd's handler, whose
// answer fills the table.

// pageStart is where a page of a list read at a fixed revision starts.
type pageStart struct {
	key, end string
	rev      int64
}

// maxPageStarts bounds rangeCounts: one entry per paged list in progress
// (and one per page a client may retry). An entry pushed out costs the
// next page of its list etcd's own count, nothing else.
const maxPageStarts = 1024

// rangeCounts holds how many keys remain in a range from a page's start,
// shared by the in-process clients of one member.
type rangeCounts struct {
	mu     sync.Mutex
	counts map[pageStart]int64 // the keys in [key, end) at rev
	order  []pageStart         // oldest first, to push out
}

func newRangeCounts() *rangeCounts {
	return &rangeCounts{counts: make(map[pageStart]int64)}
}

// keep records that n keys of [start.key, start.end) exist at start.rev.
func (c *rangeCounts) keep(start pageStart, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.counts[start]; !ok {
		if len(c.order) == maxPageStarts {
			delete(c.counts, c.order[0])
			c.order = append(c.order[:0], c.order[1:]...)
		}
		c.order = append(c.order, start)
	}
	c.counts[start] = n
}

// lookup returns the kept number of keys from start, if any.
func (c *rangeCounts) lookup(start pageStart) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.counts[start]
	return n, ok
}

// countedStart returns the start of the page in and the number of keys
// kept for it, when the stream can be read without etcd's count: a
// limited stream at a fixed revision in key order, keys and values both.
func (c *rangeCounts) countedStart(in *etcdserverpb.RangeRequest) (pageStart, int64, bool) {
	if in.Limit <= 0 || in.Revision <= 0 || len(in.Key) == 0 || len(in.RangeEnd) == 0 ||
		in.CountOnly || in.KeysOnly || !txn.IsDefaultOrdering(in.SortTarget, in.SortOrder) || txn.HasRevisionFilters(in) {
		return pageStart{}, 0, false
	}
	start := pageStart{key: string(in.Key), end: string(in.RangeEnd), rev: in.Revision}
	n, ok := c.lookup(start)
	return start, n, ok
}

// pageEnd follows a stream's chunks to keep, when it stops short of its
// range's end, the number of keys after its last one. rev is the stream's
// fixed revision, 0 for the latest: the revision its last chunk reports.
type pageEnd struct {
	counts   *rangeCounts
	end      string
	rev      int64
	returned int64
}

// saw notes a chunk before the caller has it (the caller may clear the
// chunk's keys as it decodes them).
func (p *pageEnd) saw(resp *etcdserverpb.RangeResponse) {
	n := len(resp.Kvs)
	p.returned += int64(n)
	if resp.Header == nil || !resp.More || n == 0 || p.end == "" {
		return // not the last chunk, or the range ends with it
	}
	rev := p.rev
	if rev == 0 {
		rev = resp.Header.Revision
	}
	p.counts.keep(pageStart{key: string(resp.Kvs[n-1].Key) + "\x00", end: p.end, rev: rev}, resp.Count-p.returned)
}

// streamCounted answers a page whose start's count is kept as etcd's
// handler would, chunk by chunk at the page's revision, with inRange as
// its Count instead of etcd's walk. The revision is fixed, so no
// agreement among members is needed before reading it: the member's index
// has every revision up to its own, and a revision it has not reached or
// has compacted is refused with etcd's error.
func (c *rangeCounts) streamCounted(ctx context.Context, s *etcdserver.EtcdServer, in *etcdserverpb.RangeRequest, start pageStart, inRange int64, send func(*etcdserverpb.RangeResponse) error) error {
	// Only these fields are set (countedStart): the rest are their defaults.
	r := &etcdserverpb.RangeRequest{Key: in.Key, RangeEnd: in.RangeEnd, Revision: in.Revision}
	total := in.Limit
	chunk := int64(firstChunkKeys)
	var returned, header int64
	for {
		r.Limit = min(chunk, total-returned)
		resp, _, err := txn.Range(ctx, s.Logger(), s.KV(), r, false)
		if err != nil {
			return rangeError(err)
		}
		if header == 0 {
			header = resp.Header.Revision
		}
		returned += int64(len(resp.Kvs))
		done := !resp.More || returned == total || len(resp.Kvs) == 0
		out := &etcdserverpb.RangeResponse{Kvs: resp.Kvs}
		var next []byte
		if len(resp.Kvs) > 0 {
			last := resp.Kvs[len(resp.Kvs)-1].Key
			next = append(append(make([]byte, 0, len(last)+1), last...), 0) // the key is etcd's: not appended to
		}
		if done {
			// The last chunk carries what etcd's handler puts there: the
			// store's revision when the stream began, whether keys remain,
			// and the count of the range's keys from the page's start.
			out.Header = &etcdserverpb.ResponseHeader{Revision: header}
			out.More = resp.More
			out.Count = returned
			if resp.More {
				out.Count = inRange
				c.keep(pageStart{key: string(next), end: start.end, rev: start.rev}, inRange-returned)
			}
		}
		if err := send(out); err != nil {
			return err
		}
		if done {
			return nil
		}
		r.Key = next
		chunk = nextChunkKeys(chunk, resp.Kvs, int(s.Cfg.MaxRequestBytes))
	}
}

// firstChunkKeys is a counted stream's first chunk, in keys; the chunks
// after it are sized as etcd's handler sizes them.
const firstChunkKeys = 10

// nextChunkKeys sizes the next chunk from the last: twice as many keys
// while a chunk's bytes are under half of target, half as many while they
// are over twice target, never none.
func nextChunkKeys(last int64, kvs []*mvccpb.KeyValue, target int) int64 {
	size := 0
	for _, kv := range kvs {
		size += len(kv.Key) + len(kv.Value)
	}
	switch {
	case size < target/2:
		last *= 2
	case size > target*2:
		last /= 2
	}
	return max(last, 1)
}

// rangeError is the error etcd's gRPC layer answers for a range that
// failed in the store: its own for a compacted or future revision, which
// the client and k8s.io/apiserver tell apart.
func rangeError(err error) error {
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	}
	return err
}
