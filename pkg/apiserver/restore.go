package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// defaultRestoreCheckInterval is how often the server checks etcd's history
// (one compare-and-swap of its own marker key).
const defaultRestoreCheckInterval = time.Second

// markerLeaseTTL keeps a stopped process's marker key for a while only; a
// lease, not a delete, so a crashed process leaves nothing for long. It is
// long so that an etcd unavailable for minutes is not taken for a restore.
const markerLeaseTTL = 10 * 60 // seconds

// ErrEtcdRestored ends the server when etcd's history went backwards: etcd
// was restored from a backup (or replaced) under the running server.
var ErrEtcdRestored = errors.New("etcd was restored from a backup under the running server")

// etcdHistory is where etcd's history stood at one read: the cluster it
// belongs to and its revision.
type etcdHistory struct {
	clusterID uint64
	revision  int64
}

// followedBy returns an error wrapping ErrEtcdRestored when now cannot come
// after h in one etcd's history: another cluster, or a lower revision.
// Linearizable reads never see a revision go down, and compaction does not
// lower it.
func (h etcdHistory) followedBy(now etcdHistory) error {
	switch {
	case h.clusterID != 0 && now.clusterID != h.clusterID:
		return fmt.Errorf("%w: the cluster ID changed from %x to %x", ErrEtcdRestored, h.clusterID, now.clusterID)
	case now.revision < h.revision:
		return fmt.Errorf("%w: the revision went back from %d to %d", ErrEtcdRestored, h.revision, now.revision)
	}
	return nil
}

// restoreMarker is one process's marker: a counter it advances in etcd by
// compare-and-swap, so it always knows what etcd must hold. A revision that
// went down is caught at the next read, but writes after a restore (this
// server's own repair re-creating what its stale caches still show) can
// carry the revision past the one last read before the check runs; the
// marker cannot be carried back: a restored etcd holds an older count, or
// none.
type restoreMarker struct {
	client  *clientv3.Client
	key     string
	process string
	lease   clientv3.LeaseID
	count   int64       // last count written; 0: none yet
	seen    etcdHistory // position at the last successful check
	// unsure is set when the write of count+1 failed without saying it did
	// not land: a timeout, or etcd's "database space exceeded" returned
	// for a write it applied as its database crossed the quota (NOSPACE).
	// etcd then holds count or count+1, and count+1 is no restore.
	unsure bool
}

func (m *restoreMarker) value(count int64) string {
	return m.process + "/" + strconv.FormatInt(count, 10)
}

// start grants the marker's lease and writes count 1.
func (m *restoreMarker) start(ctx context.Context) error {
	lease, err := m.client.Grant(ctx, markerLeaseTTL)
	if err != nil {
		return fmt.Errorf("restore marker lease: %w", err)
	}
	resp, err := m.client.Put(ctx, m.key, m.value(1), clientv3.WithLease(lease.ID))
	if err != nil {
		// Retried at the next tick: give this lease back rather than leave
		// one behind per failed start (etcd out of space at start-up).
		_, _ = m.client.Revoke(ctx, lease.ID)
		return fmt.Errorf("restore marker: %w", err)
	}
	m.lease, m.count = lease.ID, 1
	m.seen = etcdHistory{clusterID: resp.Header.ClusterId, revision: resp.Header.Revision}
	keepAlive, err := m.client.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("restore marker keep-alive: %w", err)
	}
	go func() {
		for range keepAlive {
		}
	}()
	return nil
}

// check advances the marker, and returns an error wrapping ErrEtcdRestored
// when etcd does not hold what this process last wrote, or its history
// position went back.
func (m *restoreMarker) check(ctx context.Context) error {
	next := m.count + 1
	resp, err := m.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(m.key), "=", m.value(m.count))).
		Then(clientv3.OpPut(m.key, m.value(next), clientv3.WithLease(m.lease))).
		Else(clientv3.OpGet(m.key)).
		Commit()
	if err != nil {
		// etcd unavailable, or the write's fate unknown: not evidence of
		// anything.
		m.unsure = true
		return err
	}
	now := etcdHistory{clusterID: resp.Header.ClusterId, revision: resp.Header.Revision}
	if err := m.seen.followedBy(now); err != nil {
		return err
	}
	if !resp.Succeeded {
		found := "no marker"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if m.unsure && string(kvs[0].Value) == m.value(next) {
				// The write that failed landed after all.
				m.count, m.seen, m.unsure = next, now, false
				return nil
			}
			found = strings.TrimPrefix(string(kvs[0].Value), m.process+"/")
		}
		return fmt.Errorf("%w: this server's marker at %s holds %s, it wrote %d", ErrEtcdRestored, m.key, found, m.count)
	}
	m.count, m.seen, m.unsure = next, now, false
	return nil
}

// watchForRestore checks etcd's history every interval until ctx ends, and
// calls restored once if it went backwards. The server then stops, so a
// supervisor restarts it on what etcd holds now. It must: after a restore
// every cache describes a future etcd no longer has (informers, the free
// indexes, the bitmaps and their group-commit revision, the transition
// records); a cached map's ModRevision can come round again with other
// contents, so a compare-and-swap against it would no longer prove
// anything; and the repair would re-create addresses for Services only its
// cache still holds. Kube-apiserver asks the operator to restart it after a
// restore; this server does it on its own, within one interval of etcd
// answering again. A restore with etcdutl's --bump-revision and
// --mark-compacted is caught too: the marker is older whatever the revision.
func watchForRestore(ctx context.Context, client *clientv3.Client, prefix string, interval time.Duration, restored func(error)) {
	m := &restoreMarker{client: client, process: string(uuid.NewUUID())}
	m.key = etcdlayout.Layout{Prefix: prefix}.RestoreMarker(m.process)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
		var err error
		if m.count == 0 {
			err = m.start(ctx) // the keep-alive lives as long as ctx
		} else {
			err = m.check(rctx)
		}
		cancel()
		if errors.Is(err, ErrEtcdRestored) {
			restored(err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
