package apiserver

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// progressEvery is how often requestProgress asks etcd for the progress of
// the informers' watches: well within a compaction's interval, so that an
// informer's store version is never one etcd compacted.
func progressEvery(compaction time.Duration) time.Duration {
	if compaction <= 0 {
		return time.Minute
	}
	return min(time.Minute, compaction/5)
}

// requestProgress asks etcd, every period until ctx ends, to tell the
// watches of the informers read from etcd stores (the Services' and the
// IPAddresses' without a watch cache) the revision they are at; each then
// gets a bookmark at it. Without one, a store's version stays at the
// revision of its resource's last write while other writes (the IPAddresses,
// the leases, the restore marker's every second) move etcd on: in a cluster
// where no Service is written for one compaction's interval, it falls behind
// etcd's compacted revision, and the node-port repair
// (repair.InformerServices), which watches from it to know that the store
// is current, lists every Service instead, each pass. A watch cache asks
// for the same notifications for its own watch.
func (s *inProcessSources) requestProgress(ctx context.Context, period time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, src := range []*storeSource{s.services, s.ipAddresses} {
			select {
			case <-src.ready:
			default:
				continue
			}
			etcdSource, ok := src.store.(storageSource)
			if !ok {
				continue // a watch cache, which sends bookmarks itself
			}
			if err := etcdSource.store.RequestWatchProgress(ctx); err != nil && ctx.Err() == nil {
				logger(ctx).V(2).Info("Asking etcd for the progress of an informer's watch failed", "resource", etcdSource.resource, "err", err)
			}
		}
	}, period)
}
