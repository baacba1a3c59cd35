package clusterip

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// StoredIPMap is one ClusterIP map read from etcd, read-only.
type StoredIPMap struct {
	// Key is the etcd key it was read from.
	Key string
	// Range is the range the map records (its own `range` field).
	Range subrange.Range
	// Map holds its bits.
	Map *Allocator
}

// ReadStoredIPMaps reads the ClusterIP maps (primary, then secondary) that
// exist under layout, each on the range it records. It writes nothing; the
// status command and the test harnesses use it to look at what the
// allocators wrote.
func ReadStoredIPMaps(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout) ([]StoredIPMap, error) {
	var out []StoredIPMap
	for _, key := range []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()} {
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
		if err != nil {
			return nil, etcdlayout.WithKey(key, err)
		}
		cidr, err := subrange.ParsePrefix(ra.Range)
		if err != nil {
			return nil, fmt.Errorf("%s: range: %w", key, err)
		}
		rng, err := subrange.New(cidr, model.Bitmap)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		bits, err := NewAllocator(rng)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if err := bits.Restore(ra.Range, ra.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, StoredIPMap{Key: key, Range: rng, Map: bits})
	}
	return out, nil
}

// IPMapExists reports whether a ClusterIP map (primary or secondary family)
// exists under layout: what tells a cluster in the bitmap model. It reads
// keys only, never writes.
func IPMapExists(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout) (bool, error) {
	for _, key := range []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()} {
		resp, err := kv.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return false, fmt.Errorf("look for the bitmap %s: %w", key, err)
		}
		if resp.Count > 0 {
			return true, nil
		}
	}
	return false, nil
}
