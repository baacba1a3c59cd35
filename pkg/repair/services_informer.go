package repair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/repair/report"
)

// InformerCatchUp bounds how long a pass waits for the Service informer to
// hold every Service write committed before the pass began; after it the
// pass lists the Services instead.
const InformerCatchUp = 10 * time.Second

// InformerServices is a ServiceSource for a server's map-based
// repairs (the node-port repair, the bitmap repair): the Services in a
// Service informer's store, once it holds every Service write committed
// before Services was called. Listing them instead costs about
// 5 KB per Service of transient heap each pass (the decoded list and the
// server's side of it): gigabytes at a million Services.
//
// Why the store is then what a consistent list would return: the Services'
// resourceVersions are etcd revisions, and the store's
// LastStoreSyncResourceVersion L is the revision of the last event it
// applied, in order (events, and the bookmarks that carry the watch
// cache's revision forward), so the store is the Services as of L.
// Services reads etcd's current revision R; the pass read its map before,
// so every write it needs is at a revision ≤ R. If L ≥ R, the store has
// them all. If not, the store may still hold them all: revisions after L
// are mostly writes of other keys (leases, maps, IPAddresses), which move
// no Service event, and a bookmark, which would move it, reaches the
// informer about once a minute at most (the API server asks etcd for its
// watch's progress that often, or at a fifth of its compaction interval, so that
// L stays a revision etcd has not compacted). So an etcd watch of the Services' prefix from
// L+1 returns the Service writes in (L, R]: etcd sends a watch its events
// in revision order and a progress notification only once it has sent
// every event up to the notification's revision, so once a notification
// at R or later (or an event after R) arrives, the events seen up to R are
// all there are. The store then holds every write ≤ R once it has applied
// the last of them, T (T = L when there are none): each Service write is
// one etcd transaction on one key, so one revision is one event. The watch
// costs the events since L, seconds of them, not a read of every Service.
//
// When the informer has not synced, its store keeps no revision (the
// client's AtomicFIFO feature off), etcd has compacted L away, or the store
// does not reach T within InformerCatchUp, Services returns the paged list
// (List), which is consistent by itself.
type InformerServices struct {
	// Informer is a Service informer over the API server whose etcd is
	// Etcd, with no selector.
	Informer cache.SharedIndexInformer
	// Etcd is the etcd the Services are stored in.
	Etcd EtcdWatcher
	// Prefix is the etcd key prefix of every Service
	// (etcdlayout.Layout.ServicesPrefix).
	Prefix string
	// List is the fallback: a paged consistent list (Options with no
	// Services: its ListServices).
	List func(ctx context.Context) ([]*corev1.Service, error)
}

// EtcdWatcher is what InformerServices reads of etcd; *clientv3.Client
// implements it.
type EtcdWatcher interface {
	clientv3.KV
	clientv3.Watcher
}

// Services returns the informer's Services, oldest first, once it holds
// every Service write committed before the call; or, failing that within
// InformerCatchUp, the Services of a paged list.
func (s InformerServices) Services(ctx context.Context) ([]*corev1.Service, error) {
	catchUp, cancel := context.WithTimeout(ctx, InformerCatchUp)
	defer cancel()
	services, err := s.fromInformer(catchUp)
	if err == nil {
		return services, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("services from the informer: %w", err)
	}
	klog.FromContext(ctx).Info("The Service informer did not catch up with etcd; listing the Services", "err", err)
	return s.List(ctx)
}

// fromInformer returns the store's Services once it holds every Service
// write at or before etcd's current revision (see InformerServices).
func (s InformerServices) fromInformer(ctx context.Context) ([]*corev1.Service, error) {
	if !s.Informer.HasSynced() {
		return nil, errors.New("the Service informer has not synced")
	}
	// R: any linearizable read returns a revision no older than every
	// write committed before it; the key itself is never stored.
	current, err := s.Etcd.Get(ctx, s.Prefix)
	if err != nil {
		return nil, fmt.Errorf("read etcd's revision: %w", err)
	}
	rev := current.Header.Revision
	synced, err := s.storeRevision()
	if err != nil {
		return nil, err
	}
	target := synced
	if synced < rev {
		if target, err = s.lastServiceWrite(ctx, synced, rev); err != nil {
			return nil, err
		}
	}
	if err := s.waitStore(ctx, target); err != nil {
		return nil, err
	}
	items := s.Informer.GetStore().List()
	services := make([]*corev1.Service, 0, len(items))
	for _, item := range items {
		svc, ok := item.(*corev1.Service)
		if !ok {
			return nil, fmt.Errorf("the Service informer holds a %T", item)
		}
		services = append(services, svc)
	}
	report.SortOldestFirst(services)
	return services, nil
}

// storeRevision is the revision of the last event the informer's store
// applied.
func (s InformerServices) storeRevision() (int64, error) {
	text := s.Informer.GetStore().LastStoreSyncResourceVersion()
	if text == "" {
		return 0, errors.New("the Service informer's store keeps no resourceVersion")
	}
	rev, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the Service informer's resourceVersion %q: %w", text, err)
	}
	return rev, nil
}

// waitStore waits until the informer's store has applied the event at
// revision target.
func (s InformerServices) waitStore(ctx context.Context, target int64) error {
	var last int64
	err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		rev, err := s.storeRevision()
		last = rev
		return rev >= target, err
	})
	if err != nil {
		return fmt.Errorf("wait for the Service informer to reach revision %d (at %d): %w", target, last, err)
	}
	return nil
}

// progressRequestEvery is how often lastServiceWrite asks etcd for a
// progress notification: etcd answers one only once the watch has caught up.
const progressRequestEvery = 20 * time.Millisecond

// lastServiceWrite returns the revision of the last Service write in
// (after, upTo], after when there is none, from an etcd watch of the
// Services' prefix from after+1 (see InformerServices).
func (s InformerServices) lastServiceWrite(ctx context.Context, after, upTo int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A stream of its own: etcd answers a progress request only when every
	// watch of the stream has caught up, and broadcasts it to all of them.
	ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "allocator-watch", "repair-services")
	events := s.Etcd.Watch(ctx, s.Prefix, clientv3.WithPrefix(), clientv3.WithRev(after+1))
	tick := time.NewTicker(progressRequestEvery)
	defer tick.Stop()
	last := after
	for {
		select {
		case resp, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("watch %s from revision %d: %w", s.Prefix, after+1, ctx.Err())
			}
			if err := resp.Err(); err != nil {
				return 0, fmt.Errorf("watch %s from revision %d: %w", s.Prefix, after+1, err)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= upTo {
				return last, nil
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision > upTo {
					return last, nil
				}
				last = ev.Kv.ModRevision
			}
		case <-tick.C:
			if err := s.Etcd.RequestProgress(ctx); err != nil {
				return 0, fmt.Errorf("request watch progress: %w", err)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("watch %s from revision %d: %w", s.Prefix, after+1, ctx.Err())
		}
	}
}
