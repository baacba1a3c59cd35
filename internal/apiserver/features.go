package apiserver

import (
	"fmt"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// setCacheFeatures turns off the watch cache's ListFromCacheSnapshot (beta
// and on by default since 1.34) for this process. With it on, the cache
// keeps a copy-on-write snapshot of its B-tree for every event still in its
// window, so that a LIST at an older resourceVersion (the pages after the
// first) is answered from memory: at 100,000 Services created at 1,000/s
// those snapshots are about a fifth of the live heap (hack/scale.sh), and
// every event copies a path of tree nodes. Off, such a LIST is read from etcd, as
// kube-apiserver did before 1.34: the same objects and resourceVersion, a
// 410 once etcd has compacted it away. Idempotent; it must run before the
// stores are built.
func setCacheFeatures() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.ListFromCacheSnapshot): false,
	}); err != nil {
		return fmt.Errorf("set the watch cache's features: %w", err)
	}
	return nil
}
