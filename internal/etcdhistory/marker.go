package etcdhistory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrRestored reports that etcd's history went back under the running
// process: etcd was restored from a backup, or replaced.
var ErrRestored = errors.New("etcd was restored from a backup under the running server")

// leaseTTL keeps a stopped process's marker for a while only; a lease, not a
// delete, so that a crashed process leaves nothing behind for long. It is
// long so that an etcd unavailable for minutes is not taken for a restore.
const leaseTTL = 10 * 60 // seconds

// position is where etcd's history stood at one answer: the cluster it
// belongs to and its revision.
type position struct {
	clusterID uint64
	revision  int64
}

// followedBy returns an error wrapping ErrRestored when now cannot come
// after p in one etcd's history: another cluster, or a lower revision.
// Linearizable answers never see the revision go down, and compaction does
// not lower it.
func (p position) followedBy(now position) error {
	switch {
	case p.clusterID != 0 && now.clusterID != p.clusterID:
		return fmt.Errorf("%w: the cluster ID changed from %x to %x", ErrRestored, p.clusterID, now.clusterID)
	case now.revision < p.revision:
		return fmt.Errorf("%w: the revision went back from %d to %d", ErrRestored, p.revision, now.revision)
	}
	return nil
}

// Marker is one process's restore marker (see the package doc): a key whose
// version counts this process's writes of it. Watch is its only writer;
// Guard's writes read what it confirmed.
type Marker struct {
	kv      clientv3.KV    // unguarded: the marker's own writes
	lease   clientv3.Lease //
	key     string
	process string // the marker's value, naming its process to a reader

	// confirmed is the marker's version as etcd last answered it: while
	// etcd's history goes on it can only be higher. 0 until the first
	// write; Guard compares nothing then.
	confirmed atomic.Int64

	// Owned by Watch.
	leaseID clientv3.LeaseID
	seen    position // at the last successful check
	// unsure is set when the write of the next version failed without
	// saying it did not land: a timeout, or etcd's "database space
	// exceeded" for a write it applied as its database crossed the quota.
	// etcd then holds the confirmed version or the next, and the next is
	// no restore.
	unsure bool

	once     sync.Once
	restored chan struct{}
	err      error // set before restored is closed
}

// NewMarker returns the marker at key of the process named process, written
// through kv and kept by a lease of lease. kv must not be one of its own
// Guard's.
func NewMarker(kv clientv3.KV, lease clientv3.Lease, key, process string) *Marker {
	return &Marker{kv: kv, lease: lease, key: key, process: process, restored: make(chan struct{})}
}

// Restored is closed once a restore is known, by Watch or by a guarded write.
func (m *Marker) Restored() <-chan struct{} { return m.restored }

// Err returns the restore found (wrapping ErrRestored), nil before.
func (m *Marker) Err() error {
	select {
	case <-m.restored:
		return m.err
	default:
		return nil
	}
}

func (m *Marker) report(err error) {
	m.once.Do(func() {
		m.err = err
		close(m.restored)
	})
}

// Watch writes the marker and advances it every interval until ctx ends or
// a restore is found, which it reports through Restored. A failed write is
// no evidence of anything: it is tried again at the next tick.
func (m *Marker) Watch(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var err error
		if m.confirmed.Load() == 0 {
			err = m.start(ctx) // the keep-alive lives as long as ctx
		} else {
			cctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
			err = m.check(cctx)
			cancel()
		}
		if errors.Is(err, ErrRestored) {
			m.report(err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.restored: // a guarded write found it first
			return
		case <-ticker.C:
		}
	}
}

// start grants the marker's lease, writes the marker and reads its version.
func (m *Marker) start(ctx context.Context) error {
	lease, err := m.lease.Grant(ctx, leaseTTL)
	if err != nil {
		return fmt.Errorf("restore marker lease: %w", err)
	}
	resp, err := m.kv.Txn(ctx).Then(
		clientv3.OpPut(m.key, m.process, clientv3.WithLease(lease.ID)),
		clientv3.OpGet(m.key), // its version: 1, or more if an earlier start's put landed
	).Commit()
	if err != nil {
		// Tried again at the next tick: give this lease back rather than
		// leave one behind per failed start (etcd out of space at start-up).
		// A put that landed is attached to the next start's lease.
		_, _ = m.lease.Revoke(ctx, lease.ID)
		return fmt.Errorf("restore marker: %w", err)
	}
	kv := first(resp.Responses[1].GetResponseRange().GetKvs())
	if kv == nil {
		return fmt.Errorf("restore marker %s: not found right after its write", m.key)
	}
	m.leaseID = lease.ID
	m.seen = position{clusterID: resp.Header.ClusterId, revision: resp.Header.Revision}
	keepAlive, err := m.lease.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("restore marker keep-alive: %w", err)
	}
	go func() {
		for range keepAlive {
		}
	}()
	m.confirmed.Store(kv.Version)
	return nil
}

// check advances the marker, and returns an error wrapping ErrRestored when
// etcd does not hold what this process last wrote, or its history went back.
func (m *Marker) check(ctx context.Context) error {
	version := m.confirmed.Load()
	resp, err := m.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(m.key), "=", version)). // etcd holds what this process wrote last
		Then(clientv3.OpPut(m.key, m.process, clientv3.WithLease(m.leaseID))).
		Else(clientv3.OpGet(m.key)). // what it holds instead
		Commit()
	if err != nil {
		// etcd unavailable, or the write's fate unknown: not evidence of
		// anything.
		m.unsure = true
		return err
	}
	now := position{clusterID: resp.Header.ClusterId, revision: resp.Header.Revision}
	if err := m.seen.followedBy(now); err != nil {
		return err
	}
	if !resp.Succeeded {
		kv := first(resp.Responses[0].GetResponseRange().GetKvs())
		if kv == nil {
			return fmt.Errorf("%w: this server's marker at %s is gone, it wrote version %d", ErrRestored, m.key, version)
		}
		if m.unsure && kv.Version == version+1 {
			// The write that failed landed after all.
			m.seen, m.unsure = now, false
			m.confirmed.Store(version + 1)
			return nil
		}
		return fmt.Errorf("%w: this server's marker at %s is at version %d, it wrote version %d", ErrRestored, m.key, kv.Version, version)
	}
	m.seen, m.unsure = now, false
	m.confirmed.Store(version + 1)
	return nil
}

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}
