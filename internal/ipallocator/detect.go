package ipallocator

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// Detect resolves n: model.Auto becomes model.Bitmap when kv is given and a
// ClusterIP map exists under prefix, model.IPAddress otherwise; any other
// name is returned as is. kv may be nil (no etcd to read: the IPAddress
// model, read through the API). It reads, never writes: a missing map is
// not created here, so a cluster is never moved to the bitmap model by
// looking at it.
func Detect(ctx context.Context, n model.Name, kv clientv3.KV, prefix string) (model.Name, error) {
	if n != model.Auto {
		return n, nil
	}
	if kv == nil {
		return model.IPAddress, nil
	}
	found, err := clusterip.IPMapExists(ctx, kv, etcdlayout.Layout{Prefix: prefix})
	if err != nil {
		return "", fmt.Errorf("detect the allocator model: %w", err)
	}
	if found {
		return model.Bitmap, nil
	}
	return model.IPAddress, nil
}
