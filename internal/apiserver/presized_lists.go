package apiserver

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// presizedLists is a resource's etcd store whose unfiltered lists get room
// for their items before the store decodes into them. The store reads a
// list from etcd as a stream of chunks that start at ten keys, and makes
// room for each chunk only up to the chunk's own length: past the first,
// every item is appended to a slice of whole objects that copies itself
// each time it fills, about four times its final size allocated, copied
// and cleared for each page. A page of 50,000 Services is 30 MB of items
// (592 bytes each), so a list of a large collection pays that growth on
// every page (docs/performance.md: the repair through the API).
//
// The room is the page's limit, or, for a list of the whole collection, the
// collection's object count, never more than that count: a page of 50,000
// of ten objects gets room for ten. The count is the store's Stats (the
// server's informer's count, informerCounts, or etcd's count-only read),
// which the registry reads every minute by
// default for its object count metric (Config.CountMetricPollPeriod,
// --etcd-count-metric-poll-period) and this store keeps; when no one has
// read it for countTTL (a longer period, or none), the next list reads it. A
// count behind the collection only leaves the last items to grow the
// slice as before.
type presizedLists struct {
	storage.Interface
	// prefix is the resource's key prefix: a list at it is the whole
	// collection, a list below it a namespace's share, whose size the
	// collection's count does not tell.
	prefix string
	count  objectCount
	// informer counts the collection when the server's informer holds it
	// (informerCounts); nil, or not synced: etcd counts it.
	informer *informerCount
}

// countTTL is how long a collection's count is taken as is: longer than the
// registry's minute between its own reads with their jitter, so that a
// list reads it itself only when the registry does not (a count-only read
// walks etcd's index over every key of the collection).
const countTTL = 90 * time.Second

// maxRoom bounds the room given a list of the whole collection ahead of its
// items, whatever the count says.
const maxRoom = 1 << 22

func newPresizedLists(store storage.Interface, prefix string) *presizedLists {
	return &presizedLists{Interface: store, prefix: strings.TrimSuffix(prefix, "/")}
}

// GetList is the store's GetList into a list with room made for its items.
func (s *presizedLists) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if n := s.room(ctx, key, opts); n > 0 {
		makeRoom(listObj, n)
	}
	return s.Interface.GetList(ctx, key, opts, listObj)
}

// room is how many items a list is given room for ahead of them: 0 when the
// store is left to grow it (a selector filters what etcd returns, a
// namespace's whole list, no count known).
func (s *presizedLists) room(ctx context.Context, key string, opts storage.ListOptions) int {
	if !opts.Recursive || !opts.Predicate.Empty() {
		return 0
	}
	limit := opts.Predicate.Limit
	whole := strings.TrimSuffix(key, "/") == s.prefix
	if limit <= 0 && !whole {
		return 0
	}
	n := s.count.get(ctx, s)
	if n <= 0 {
		return 0
	}
	if limit > 0 {
		return int(min(limit, n))
	}
	// The whole collection, as many as counted and some created since.
	return int(min(n+n/64+16, maxRoom))
}

// ServesStoredLists implements rawlist.Source: the etcd store below reads a
// rawlist.List's items (rawStorage gives it a rawlist.Decoder).
func (s *presizedLists) ServesStoredLists() bool { return true }

// Stats is the store's Stats, whose object count the store keeps: the
// informer's count when it has one, else etcd's.
func (s *presizedLists) Stats(ctx context.Context) (storage.Stats, error) {
	if n, ok := s.informer.objects(); ok {
		s.count.set(n)
		return storage.Stats{ObjectCount: n}, nil
	}
	stats, err := s.Interface.Stats(ctx)
	if err == nil {
		s.count.set(stats.ObjectCount)
	}
	return stats, err
}

// makeRoom gives listObj's items room for n when it has none yet.
func makeRoom(listObj runtime.Object, n int) {
	ptr, err := meta.GetItemsPtr(listObj)
	if err != nil {
		return // not a list the store decodes into; it says so itself
	}
	v := reflect.ValueOf(ptr).Elem()
	if v.Kind() != reflect.Slice || v.Len() > 0 || v.Cap() >= n {
		return
	}
	v.Set(reflect.MakeSlice(v.Type(), 0, n))
}

// objectCount is a collection's object count as etcd last reported it.
type objectCount struct {
	n          atomic.Int64
	read       atomic.Int64 // when n was read, in UnixNano; 0: never
	refreshing atomic.Bool
}

// get returns the count, reading it through store (whose Stats sets it)
// when it is older than countTTL. One caller reads it at a time; the
// others take the count as it was (0 before the first read ends).
func (c *objectCount) get(ctx context.Context, store interface {
	Stats(context.Context) (storage.Stats, error)
}) int64 {
	read := c.read.Load()
	if read != 0 && time.Since(time.Unix(0, read)) < countTTL {
		return c.n.Load()
	}
	if !c.refreshing.CompareAndSwap(false, true) {
		return c.n.Load()
	}
	defer c.refreshing.Store(false)
	if _, err := store.Stats(ctx); err != nil {
		return c.n.Load() // no room made is the store's own behaviour
	}
	return c.n.Load()
}

func (c *objectCount) set(n int64) {
	c.n.Store(n)
	c.read.Store(time.Now().UnixNano())
}
