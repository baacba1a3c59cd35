package bitmap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// MaxSlots bounds the map of one range: an IPv4 /12 (1,048,574 addresses)
// is the largest the bitmap model serves; the IPAddress model's free-index may
// use bitmaps up to 2^24 slots.
const MaxSlots = 1 << 24

// EtcdOptions tune a Store. The zero value is the production default.
type EtcdOptions struct {
	// DisableBatching makes every call its own CAS write (one allocation per
	// etcd transaction), as upstream kube-apiserver does. Only benchmarks and
	// comparisons want this.
	DisableBatching bool
	// MaxBatch caps how many calls one CAS write carries (default 512).
	MaxBatch int
	// MaxAttempts bounds the CAS retries of one batch on conflicts (default 100;
	// the batch's deadline bounds them too).
	MaxAttempts int
	// RequestTimeout bounds one batch when no caller has an earlier deadline
	// (default 15s).
	RequestTimeout time.Duration
	// MinBatchTime is the least time a batch gets, whatever its callers'
	// deadlines (default 1s, capped by RequestTimeout): an etcd write cut
	// short may still land, and its callers would never learn it. Resolving
	// such an ambiguous write gets the same time again.
	MinBatchTime time.Duration
}

func (o EtcdOptions) withDefaults() EtcdOptions {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.DisableBatching {
		o.MaxBatch = 1
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 100
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 15 * time.Second
	}
	if o.MinBatchTime <= 0 {
		o.MinBatchTime = time.Second
	}
	o.MinBatchTime = min(o.MinBatchTime, o.RequestTimeout)
	return o
}

// ErrStoredRangeMismatch is returned when the RangeAllocation in etcd is for a
// different range than the one configured. Only a re-range rewrites such a
// map (RerangeWith, RerangeSlots: the allocators' Open); allocations never do, so a replica still on
// the old range fails its writes instead of overwriting the new map.
var ErrStoredRangeMismatch = errors.New("stored range does not match the configured range")

// EtcdStats are counters for metrics and benchmarks.
type EtcdStats struct {
	// Writes is the number of successful CAS transactions that changed the map.
	Writes uint64
	// Conflicts is the number of CAS transactions that lost to another writer.
	Conflicts uint64
	// Batches is the number of batches committed (with or without a write).
	Batches uint64
	// Requests is the number of calls those batches carried.
	Requests uint64
	// BytesWritten is the total size of the values written.
	BytesWritten uint64
	// AmbiguousLanded counts writes whose transaction failed ambiguously and
	// that the batch's own resolve found landed.
	AmbiguousLanded uint64
	// Unresolved counts ambiguous writes whose outcome the batch could not
	// learn (its members failed with the outcome unknown); Settled those of
	// them settled afterwards (whatever their members were told did not
	// happen undone), Unsettled those given up on (what they changed may
	// leak until the repair frees it).
	Unresolved, Settled, Unsettled uint64
}

// Space is what the slots of one RangeAllocation stand for: the range it
// covers, named the way its "range" field spells it. ClusterIPs (a
// subrange.Range, slot i = network+1+i) and node ports (slot i = base+i) are
// the two spaces; the store below knows nothing else about them.
type Space interface {
	// Spec is the RangeAllocation's range field, e.g. "10.0.0.0/24" or
	// "30000-32767".
	Spec() string
	// Slots is the number of slots and StaticSlots the lower (static) band.
	Slots() int
	StaticSlots() int
	// Matches reports whether a stored range field names this space.
	Matches(stored string) bool
}

// Store is one RangeAllocation on etcd at one key, slot-level: the in-memory
// bitset caches it with the ModRevision it was read at, and every change goes
// through the CAS and group-commit protocol of the package doc. It does not
// know what a slot means (see Space); pkg/bitmap/clusterip maps IPs to its
// slots and pkg/bitmap/nodeport node ports.
type Store struct {
	client   *clientv3.Client
	key      string
	stampKey string // etcdlayout.MapStamp(key); see stamp.go
	space    Space
	opts     EtcdOptions

	mu      sync.Mutex
	pending []*request // guarded by mu
	busy    bool       // guarded by mu: a leader is committing a batch

	// Owned by the current leader (the goroutine that set busy); no lock,
	// because exactly one leader runs at a time and hand-over goes through mu.
	bits   *bitset.Set
	rev    int64  // ModRevision bits were loaded from
	stamp  string // the map's stamp at rev (stamp.go)
	loaded bool   // bits, rev and stamp reflect a value read from etcd
	random *rand.Rand

	stats struct {
		writes, conflicts, batches, requests, bytesWritten atomic.Uint64
		ambiguousLanded, unresolved, settled, unsettled    atomic.Uint64
	}
}

// NewStore returns a store of space's slots at key. It does no I/O: the first
// call loads the map; Open creates it.
func NewStore(client *clientv3.Client, key string, space Space, opts EtcdOptions) (*Store, error) {
	if client == nil || key == "" {
		return nil, errors.New("new etcd store: an etcd client and a key are required")
	}
	if space.Slots() > MaxSlots {
		return nil, fmt.Errorf("range %s has %d slots, more than the %d a bitmap holds", space.Spec(), space.Slots(), MaxSlots)
	}
	bits, err := bitset.New(space.Slots(), space.StaticSlots())
	if err != nil {
		return nil, fmt.Errorf("range %s: %w", space.Spec(), err)
	}
	return &Store{
		client:   client,
		key:      key,
		stampKey: etcdlayout.MapStamp(key),
		space:    space,
		opts:     opts.withDefaults(),
		bits:     bits,
		random:   rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}, nil
}

// Key is the etcd key of the RangeAllocation.
func (a *Store) Key() string { return a.key }

// Space is what the store's slots stand for.
func (a *Store) Space() Space { return a.space }

// Stats returns the store's counters.
func (a *Store) Stats() EtcdStats {
	return EtcdStats{
		Writes:          a.stats.writes.Load(),
		Conflicts:       a.stats.conflicts.Load(),
		Batches:         a.stats.batches.Load(),
		Requests:        a.stats.requests.Load(),
		AmbiguousLanded: a.stats.ambiguousLanded.Load(),
		Unresolved:      a.stats.unresolved.Load(),
		Settled:         a.stats.settled.Load(),
		Unsettled:       a.stats.unsettled.Load(),
		BytesWritten:    a.stats.bytesWritten.Load(),
	}
}

// Create creates the empty RangeAllocation if the key is absent, in one
// create-if-absent transaction, so two initialisers cannot both win. It
// reports whether this call created it. A stored map of another range is
// ErrStoredRangeMismatch (wrapped), never overwritten here.
func (a *Store) Create(ctx context.Context) (bool, error) {
	value, err := etcdlayout.EncodeRangeAllocation(a.space.Spec(), nil)
	if err != nil {
		return false, fmt.Errorf("initialize %s: %w", a.key, err)
	}
	put, _ := a.putOps(value)
	resp, err := a.client.Txn(ctx).
		// the map does not exist
		If(clientv3.Compare(clientv3.CreateRevision(a.key), "=", 0)).
		// create it empty, with a fresh stamp
		Then(put...).
		// someone else's map, to check that its range is ours
		Else(clientv3.OpGet(a.key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("initialize %s: %w", a.key, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return false, fmt.Errorf("initialize %s: key vanished during the transaction", a.key)
	}
	if _, _, err := a.decode(kvs[0].Value); err != nil {
		return false, fmt.Errorf("initialize: %w", err)
	}
	return false, nil
}

// decode reads a stored value and checks its range.
func (a *Store) decode(value []byte) (string, []byte, error) {
	ra, err := etcdlayout.DecodeRangeAllocation(value)
	if err != nil {
		return "", nil, fmt.Errorf("value at %s is not a valid RangeAllocation: %w", a.key, err)
	}
	if !a.space.Matches(ra.Range) {
		return "", nil, fmt.Errorf("%s holds range %q, configured %s: %w", a.key, ra.Range, a.space.Spec(), ErrStoredRangeMismatch)
	}
	return ra.Range, ra.Data, nil
}

// AllocateSlot reserves slot i. Its own answer is allocation.ErrAllocated
// when the slot is taken; any other error is a failure of the whole batch.
func (a *Store) AllocateSlot(ctx context.Context, i int) error {
	req := &request{kind: opAllocate, slot: i}
	if err := a.submit(ctx, req); err != nil {
		return err
	}
	return req.err
}

// AllocateNextSlot reserves a free slot, upper band first. Its own answer is
// allocation.ErrFull when none is left; any other error is a failure of the
// whole batch.
func (a *Store) AllocateNextSlot(ctx context.Context) (int, error) {
	req := &request{kind: opAllocateNext}
	if err := a.submit(ctx, req); err != nil {
		return 0, err
	}
	if req.err != nil {
		return 0, req.err
	}
	return req.slot, nil
}

// ReleaseSlot frees slot i; a no-op when it is not set. Every error is a
// failure of the whole batch.
func (a *Store) ReleaseSlot(ctx context.Context, i int) error {
	req := &request{kind: opRelease, slot: i}
	if err := a.submit(ctx, req); err != nil {
		return err
	}
	return req.err
}

// Read runs fn on the cached map once a transaction has confirmed that the
// cache is current. fn runs in the committing goroutine, must not block and
// must not keep or change the set (Clone it to keep it).
func (a *Store) Read(ctx context.Context, fn func(*bitset.Set)) error {
	req := &request{kind: opRead, read: fn}
	if err := a.submit(ctx, req); err != nil {
		return err
	}
	return req.err
}

// Usage reports the fill level, confirmed against etcd.
func (a *Store) Usage(ctx context.Context) (allocation.Usage, error) {
	var u allocation.Usage
	if err := a.Read(ctx, func(b *bitset.Set) { u = UsageOf(b) }); err != nil {
		return allocation.Usage{}, fmt.Errorf("usage: %w", err)
	}
	return u, nil
}

// UsageOf is the fill level of a map's slots, as Store.Usage reports it.
func UsageOf(b *bitset.Set) allocation.Usage {
	return allocation.Usage{
		Size:       uint64(b.Size()),
		Used:       uint64(b.Used()),
		StaticSize: uint64(b.StaticSize()),
		StaticUsed: uint64(b.UsedStatic()),
	}
}
