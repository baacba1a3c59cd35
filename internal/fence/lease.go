package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// LeaseTTL is the life of the lease a request's markers and fence key
	// carry: the time a request has, from its first write, to close its
	// fence and learn its writes' outcome.
	LeaseTTL = 5 * time.Minute
	// leaseReuse is how long after its grant a lease is given to new
	// requests: each has at least LeaseTTL-leaseReuse left.
	leaseReuse = time.Minute
)

// leases hands out the lease new requests write with, granting a new one
// when the current one is older than leaseReuse. It is safe for concurrent
// use.
type leases struct {
	lessor clientv3.Lease
	grant  chan struct{} // holds a token while a grant is in flight

	mu    sync.Mutex
	id    clientv3.LeaseID // guarded by mu
	until time.Time        // when id stops being given out; guarded by mu
}

func newLeases(lessor clientv3.Lease) *leases {
	return &leases{lessor: lessor, grant: make(chan struct{}, 1)}
}

// current returns the lease to give a new request, granting one if needed.
func (l *leases) current(ctx context.Context) (clientv3.LeaseID, error) {
	if id, ok := l.fresh(); ok {
		return id, nil
	}
	select {
	case l.grant <- struct{}{}:
		defer func() { <-l.grant }()
	case <-ctx.Done():
		return clientv3.NoLease, fmt.Errorf("wait for a write lease: %w", ctx.Err())
	}
	if id, ok := l.fresh(); ok { // granted while we waited
		return id, nil
	}
	asked := time.Now()
	resp, err := l.lessor.Grant(ctx, int64(LeaseTTL/time.Second))
	if err != nil {
		return clientv3.NoLease, fmt.Errorf("grant a write lease: %w", err)
	}
	l.mu.Lock()
	l.id, l.until = resp.ID, asked.Add(leaseReuse)
	l.mu.Unlock()
	return resp.ID, nil
}

func (l *leases) fresh() (clientv3.LeaseID, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.id != clientv3.NoLease && time.Now().Before(l.until)
}

// forget stops giving out id, which etcd no longer has.
func (l *leases) forget(id clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.id = clientv3.NoLease
	}
}

// leaseGone reports whether err is etcd's refusal of a put to a lease it
// does not have (expired or revoked): the whole transaction was refused.
// Over gRPC it is rpctypes.ErrLeaseNotFound; the text covers a client that
// calls the member in process, whose error may not be converted.
func leaseGone(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), "lease not found")
}
