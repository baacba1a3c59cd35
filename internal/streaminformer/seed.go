package streaminformer

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"
)

// A SeedFunc returns what the store held at a resource version, to start
// from instead of a list: objs as the source's watch would send them, rv
// the version they are at. ok false means there is none (the informer
// lists). Run calls it once, first; it may block until it knows.
type SeedFunc func(ctx context.Context) (objs []any, rv string, ok bool)

// progressRetry is how often a seeded informer asks its source for a
// bookmark until it gets one.
const progressRetry = 100 * time.Millisecond

// SetSeed makes Run start from seed's objects and watch on from its
// version, instead of from a watch that lists everything first. The
// informer has synced at the watch's first bookmark, which progress asks
// the source for (it must make the source send one at a version it reaches
// after the watch began, once every change before it is sent: etcd's
// progress notifications do), every progressRetry until it comes. A seed's
// version the source no longer has (410 Gone) makes the informer list
// over the seeded store, as it would after any compacted watch. Only before
// Run.
func (inf *Informer) SetSeed(seed SeedFunc, progress func(ctx context.Context) error) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.ctx != nil || inf.stopped {
		return fmt.Errorf("seed the %s informer: it has started", inf.description)
	}
	inf.seed, inf.progress = seed, progress
	return nil
}

// applySeed stores the seed's objects, if there is one, and reports
// whether the store is now the seed's state.
func (inf *Informer) applySeed(ctx context.Context) bool {
	if inf.seed == nil {
		return false
	}
	objs, rv, ok := inf.seed(ctx)
	if !ok {
		return false
	}
	logger := klog.FromContext(ctx).WithValues("informer", inf.description)
	start := time.Now()
	if inf.transform != nil {
		for i, obj := range objs {
			var err error
			if objs[i], err = inf.transform(obj); err != nil {
				logger.Error(err, "Seeding the store failed; listing instead")
				return false
			}
		}
	}
	inf.mu.Lock()
	defer inf.mu.Unlock()
	// One Replace, not an Add each: the store's map is made at its size
	// once, not grown object by object under the lock (BenchmarkSeed). The
	// handlers hear of each object once the store holds them all, as of a
	// list in client-go's informer.
	if err := inf.indexer.Replace(objs, rv); err != nil {
		logger.Error(err, "Seeding the store failed; listing instead")
		return false
	}
	for _, obj := range objs {
		inf.notify(notification{kind: added, obj: obj, initial: true})
	}
	inf.lastRV.Store(&rv)
	inf.indexer.Bookmark(rv)
	inf.whole = true
	logger.V(2).Info("Store seeded; watching from its version", "objects", len(objs), "resourceVersion", rv, "took", time.Since(start))
	return true
}

// askProgress asks the source for a bookmark every progressRetry until the
// informer has synced or ctx (the watch's) ends.
func (inf *Informer) askProgress(ctx context.Context) {
	t := time.NewTicker(progressRetry)
	defer t.Stop()
	for !inf.HasSynced() {
		if err := inf.progress(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Asking for the watch's progress failed", "informer", inf.description, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-inf.syncedCh:
			return
		case <-t.C:
		}
	}
}

// Snapshot returns the store's objects and the resource version they are
// at, once Run has returned. ok is false when the store is no one
// version's state: Run has not returned, or it returned in the middle of a
// list.
func (inf *Informer) Snapshot() (objs []any, rv string, ok bool) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	last := inf.lastRV.Load()
	if !inf.stopped || !inf.whole || last == nil {
		return nil, "", false
	}
	return inf.indexer.List(), *last, true
}
