package nodeport

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// StoredMap is the node-port map as stored at layout's
// <prefix>/ranges/servicenodeports, on the range the map itself records.
type StoredMap struct {
	Key   string
	Range Range
	// Data is the map's bits (bitmap.Store's layout), offsets from Range's base.
	Data []byte
}

// ReadStoredMap reads the node-port map with a plain Get: never through an
// allocator, which may write. found is false when no map is stored (no
// server ever allocated node ports there).
func ReadStoredMap(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout) (m StoredMap, found bool, err error) {
	key := layout.ServiceNodePortRange()
	resp, err := kv.Get(ctx, key)
	if err != nil {
		return StoredMap{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return StoredMap{}, false, nil
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil {
		return StoredMap{}, false, etcdlayout.WithKey(key, err)
	}
	rng, err := Parse(ra.Range)
	if err != nil {
		return StoredMap{}, false, fmt.Errorf("%s holds range %q: %w", key, ra.Range, err)
	}
	return StoredMap{Key: key, Range: rng, Data: ra.Data}, true, nil
}
