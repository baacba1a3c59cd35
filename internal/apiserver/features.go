package apiserver

import (
	"fmt"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// setStorageFeatures turns off two storage features of k8s.io/apiserver
// for this process. Idempotent; it must run before the stores are built.
//
// ListFromCacheSnapshot (beta and on by default since 1.34): with it on, the
// watch cache keeps a copy-on-write snapshot of its B-tree for every event
// still in its window, so that a LIST at an older resourceVersion (the
// pages after the first) is answered from memory: the snapshots hold
// memory in proportion to the write rate and the window (the figures are
// in docs/performance.md), and every event copies a path of tree nodes.
// Off, such a LIST is read from etcd, as kube-apiserver did before 1.34:
// the same objects and resourceVersion, a 410 once etcd has compacted it
// away.
//
// ConcurrentWatchObjectDecode (on by default since 1.37): with it on, a
// watch of etcd decodes each event in a goroutine of its own, whose stack
// grows for every decode. The server's informers watch etcd without a
// watch cache, and a start-up's watch lists carry every stored Service and
// IPAddress as events, so the stack growth is paid once per stored object
// (docs/performance.md). Off, each watch decodes in its own goroutine, in
// order; the watches of different resources still decode in parallel.
func setStorageFeatures() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.ListFromCacheSnapshot):       false,
		string(features.ConcurrentWatchObjectDecode): false,
	}); err != nil {
		return fmt.Errorf("set the storage features: %w", err)
	}
	return nil
}
