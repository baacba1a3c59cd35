package listhold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// DefaultTTL is the lease of a server's published hold: a server that dies
// holds nothing 15 s later. Its renewal is one etcd request every 5 s, and
// only while the server serves a paged list.
const DefaultTTL = 15 * time.Second

// withdrawTimeout bounds the revocation of a server's hold when it stops;
// one that fails ends with its lease.
const withdrawTimeout = 5 * time.Second

// Shared publishes one server's oldest hold in etcd and reads every
// server's before a compaction (Guard).
type Shared struct {
	kv     clientv3.KV
	lessor clientv3.Lease
	key    string // this server's hold
	prefix string // every server's
	holds  *Holds
	ttl    time.Duration

	// Owned by Run's goroutine.
	lease     clientv3.LeaseID // 0: none granted
	published int64            // the revision under key; 0: none
}

// NewShared publishes holds as the process's hold in the etcd of c, under
// layout's prefix, on leases of ttl (0: DefaultTTL; whole seconds, at least
// one).
func NewShared(c *clientv3.Client, layout etcdlayout.Layout, process string, holds *Holds, ttl time.Duration) *Shared {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Shared{
		kv: c.KV, lessor: c.Lease,
		key: layout.ListHold(process), prefix: layout.ListHoldsPrefix(),
		holds: holds, ttl: max(ttl.Truncate(time.Second), time.Second),
	}
}

// Holds are the holds this server publishes.
func (s *Shared) Holds() *Holds { return s.holds }

// Run publishes the oldest hold (none: no key) whenever a new revision is
// held, and again every third of the lease's TTL or half the idle limit,
// whichever is shorter (a hold published stays up to that long after its
// list), until ctx ends; then it withdraws it.
func (s *Shared) Run(ctx context.Context) {
	tick := time.NewTicker(min(s.ttl/3, s.holds.limits.Idle/2))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
			_ = s.withdraw(wctx)
			cancel()
			return
		case <-tick.C:
		case <-s.holds.Changed():
		}
		if err := s.publish(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Info("Publishing the paged lists' hold on etcd's compaction failed; trying again", "err", err)
		}
	}
}

// publish puts the oldest hold under the server's key, keeps its lease
// alive while it stays the oldest, and withdraws it when nothing is held.
func (s *Shared) publish(ctx context.Context) error {
	rev, held := s.holds.Oldest()
	if !held {
		return s.withdraw(ctx)
	}
	if rev == s.published {
		_, err := s.lessor.KeepAliveOnce(ctx, s.lease)
		if err == nil {
			return nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("keep the hold at revision %d alive: %w", rev, err)
		}
		// The lease expired, and the key with it: publish anew.
		s.lease, s.published = 0, 0
	}
	if s.lease == 0 {
		l, err := s.lessor.Grant(ctx, int64(s.ttl/time.Second))
		if err != nil {
			return fmt.Errorf("grant the hold's lease: %w", err)
		}
		s.lease = l.ID
	}
	if _, err := s.kv.Put(ctx, s.key, strconv.FormatInt(rev, 10), clientv3.WithLease(s.lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.lease = 0
		}
		return fmt.Errorf("publish the hold at revision %d: %w", rev, err)
	}
	s.published = rev
	return nil
}

// withdraw revokes the hold's lease, which deletes its key.
func (s *Shared) withdraw(ctx context.Context) error {
	if s.lease == 0 {
		return nil
	}
	if _, err := s.lessor.Revoke(ctx, s.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("withdraw the hold at revision %d: %w", s.published, err)
	}
	s.lease, s.published = 0, 0
	return nil
}

// Floor is the oldest revision any server holds (the holds other servers
// published and this server's own), and whether one does. A value under the
// prefix that is no revision holds nothing.
func (s *Shared) Floor(ctx context.Context) (int64, bool, error) {
	resp, err := s.kv.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, false, fmt.Errorf("read the paged lists' holds: %w", err)
	}
	floor, held := s.holds.Oldest()
	for _, kv := range resp.Kvs {
		if string(kv.Key) == s.key {
			continue // published from holds, read above as they are now
		}
		rev, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil || rev <= 0 {
			continue
		}
		if !held || rev < floor {
			floor, held = rev, true
		}
	}
	return floor, held, nil
}

// Guard returns kv with its compactions held back: Compact(rev) compacts to
// the Floor when that is older than rev, and to rev otherwise. A compaction
// whose holds cannot be read is not made (the compactor tries again at its
// next interval).
func (s *Shared) Guard(kv clientv3.KV) clientv3.KV { return heldKV{KV: kv, shared: s} }

type heldKV struct {
	clientv3.KV
	shared *Shared
}

func (k heldKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	floor, held, err := k.shared.Floor(ctx)
	if err != nil {
		return nil, fmt.Errorf("compact etcd to revision %d: %w", rev, err)
	}
	if !held || floor >= rev {
		return k.KV.Compact(ctx, rev, opts...)
	}
	klog.FromContext(ctx).Info("Compacting etcd no further than a paged list in progress reads", "revision", rev, "held", floor)
	resp, err := k.KV.Compact(ctx, floor, opts...)
	if errors.Is(err, rpctypes.ErrCompacted) {
		// etcd is compacted up to the hold already: nothing to do now.
		return &clientv3.CompactResponse{}, nil
	}
	return resp, err
}
