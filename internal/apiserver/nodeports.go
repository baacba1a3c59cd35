package apiserver

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"

	"github.com/allocator/allocator/pkg/bitmap"
)

// openNodePorts builds the node-port allocator on the server's etcd and
// creates its map, empty, when it is missing, as kube-apiserver does at
// start-up (create-if-absent, so replicas starting together cannot clobber
// each other). Both IP models use it: upstream always keeps node ports in
// the bitmap. A stored map of another range is re-ranged (nodeport.Open).
func openNodePorts(ctx context.Context, client *clientv3.Client, etcdPrefix string, r nodeport.Range) (*nodeport.EtcdAllocator, error) {
	key := etcdlayout.Layout{Prefix: etcdPrefix}.ServiceNodePortRange()
	a, err := nodeport.NewEtcd(client, key, r, bitmap.EtcdOptions{})
	if err != nil {
		return nil, fmt.Errorf("node-port range %s: %w", r, err)
	}
	created, dropped, err := a.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("node-port range %s: %w", r, err)
	}
	if created {
		klog.FromContext(ctx).V(2).Info("Created the node-port allocation map", "key", key, "range", r)
	}
	if len(dropped) > 0 {
		klog.FromContext(ctx).Info("The node-port range changed: allocations outside it were dropped from the map", "range", r, "dropped", dropped)
	}
	return a, nil
}
