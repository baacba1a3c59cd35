package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// maxLeaseReuse is how long after its grant a lease is given to new
// requests, at most: each has nearly the whole TTL left, and a busy server
// grants a few leases a minute.
const maxLeaseReuse = 10 * time.Second

// revokeTimeout bounds the revoke of a lease no request uses any more; one
// that fails expires at its TTL.
const revokeTimeout = 5 * time.Second

// Leases hands out the leases the guarded writes of one server carry
// (Guard, GuardClaims). Each lease is registered under
// layout.WriteLease(id), a key that carries the lease, before any request
// gets it, so the keys under layout.WriteLeasesPrefix() are the leases a
// write may still be applied with (InFlight reads them): etcd deletes the
// key when the lease ends, by expiry or revoke. A lease is given to the
// requests that start within its reuse window and revoked when the last of
// them is Done after that, so on a quiet server no lease outlives its last
// request by more than the window; the lease of a request that lost an
// answer lives until the request settles it (Fence.Done) or its TTL ends.
// It is safe for concurrent use.
type Leases struct {
	kv     clientv3.KV
	lessor clientv3.Lease
	layout etcdlayout.Layout
	ttl    time.Duration
	reuse  time.Duration
	grant  chan struct{} // holds a token while a grant is in flight

	mu    sync.Mutex
	id    clientv3.LeaseID         // the lease given out now; guarded by mu
	until time.Time                // when id stops being given out; guarded by mu
	refs  map[clientv3.LeaseID]int // fences holding each lease; guarded by mu
	swept clientv3.LeaseID         // the lease a sweep is scheduled for; guarded by mu
}

// NewLeases returns the write leases of a server on c, registered under
// layout, each living ttl (allocation.WriteLease when not positive).
func NewLeases(c *clientv3.Client, layout etcdlayout.Layout, ttl time.Duration) *Leases {
	if ttl <= 0 {
		ttl = allocation.WriteLease
	}
	return &Leases{kv: c.KV, lessor: c.Lease, layout: layout, ttl: ttl, reuse: min(maxLeaseReuse, ttl/5),
		grant: make(chan struct{}, 1), refs: map[clientv3.LeaseID]int{}}
}

// TTL is the life of the leases.
func (l *Leases) TTL() time.Duration { return l.ttl }

// acquire returns the lease to give a new request, granting and registering
// one if needed, and counts the request as holding it until release.
func (l *Leases) acquire(ctx context.Context) (clientv3.LeaseID, error) {
	if id, ok := l.take(); ok {
		return id, nil
	}
	select {
	case l.grant <- struct{}{}:
		defer func() { <-l.grant }()
	case <-ctx.Done():
		return clientv3.NoLease, fmt.Errorf("wait for a write lease: %w", ctx.Err())
	}
	if id, ok := l.take(); ok { // granted while we waited
		return id, nil
	}
	asked := time.Now()
	resp, err := l.lessor.Grant(ctx, int64(l.ttl/time.Second))
	if err != nil {
		return clientv3.NoLease, fmt.Errorf("grant a write lease: %w", err)
	}
	if _, err := l.kv.Put(ctx, l.layout.WriteLease(LeaseName(resp.ID)), "", clientv3.WithLease(resp.ID)); err != nil {
		l.revoke(resp.ID)
		return clientv3.NoLease, fmt.Errorf("register write lease %s: %w", LeaseName(resp.ID), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old := l.id; old != clientv3.NoLease && l.refs[old] == 0 {
		delete(l.refs, old)
		go l.revoke(old)
	}
	l.id, l.until = resp.ID, asked.Add(l.reuse)
	l.refs[resp.ID]++
	return resp.ID, nil
}

// take returns the current lease, counted, while it is given out.
func (l *Leases) take() (clientv3.LeaseID, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == clientv3.NoLease || !time.Now().Before(l.until) {
		return clientv3.NoLease, false
	}
	l.refs[l.id]++
	return l.id, true
}

// release ends one request's hold on id. The last hold of a lease no longer
// given out revokes it; the last hold of the current one revokes it when
// its window closes, unless a request takes it first.
func (l *Leases) release(id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refs[id]--
	if l.refs[id] > 0 {
		return
	}
	if id != l.id {
		delete(l.refs, id)
		go l.revoke(id)
		return
	}
	if l.swept != id {
		l.swept = id
		time.AfterFunc(time.Until(l.until), l.sweep)
	}
}

// sweep revokes the current lease once its window has closed and no
// request holds it.
func (l *Leases) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.id
	l.swept = clientv3.NoLease
	if id == clientv3.NoLease || time.Now().Before(l.until) || l.refs[id] > 0 {
		return
	}
	delete(l.refs, id)
	l.id = clientv3.NoLease
	go l.revoke(id)
}

func (l *Leases) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	_, _ = l.lessor.Revoke(ctx, id) // one that fails expires at its TTL
}

// forget stops giving out id, which etcd no longer has.
func (l *Leases) forget(id clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.id = clientv3.NoLease
	}
}

// LeaseName is the name a write lease is registered by.
func LeaseName(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// InFlight reads the write leases alive, registered under a layout
// (repair.InFlight): the leases a write of ours may still be applied with.
type InFlight struct {
	KV     clientv3.KV
	Layout etcdlayout.Layout
}

// Leases returns the names of the write leases alive now.
func (f InFlight) Leases(ctx context.Context) ([]string, error) {
	prefix := f.Layout.WriteLeasesPrefix()
	resp, err := f.KV.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		names = append(names, strings.TrimPrefix(string(kv.Key), prefix))
	}
	return names, nil
}

// leaseGone reports whether err is etcd's refusal of a put to a lease it
// does not have (expired or revoked): the whole transaction was refused.
// Over gRPC it is rpctypes.ErrLeaseNotFound; the text covers a client that
// calls the member in process, whose error may not be converted.
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), "lease not found")
}
