package apiserver

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// informerCounts are the object counts of the resources the server's own
// informers hold whole (the Services and IPAddresses read from etcd stores,
// without a watch cache). Their stores answer Stats, which the registry
// asks every --etcd-count-metric-poll-period for apiserver_resource_objects
// and the presized lists read, from the informer: etcd's count walks its
// index over every key of the resource, seconds of CPU a minute at a
// million Services and IPAddresses, while the informer holds the same
// objects as of a moment ago. A watch cache counts its own objects.
type informerCounts struct {
	mu sync.Mutex
	by map[schema.GroupResource]*informerCount // guarded by mu
}

// informerCount is one resource's count, once an informer is set.
type informerCount struct {
	informer atomic.Pointer[cache.SharedIndexInformer]
}

// of returns resource's count, made on first use.
func (c *informerCounts) of(resource schema.GroupResource) *informerCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = make(map[schema.GroupResource]*informerCount)
	}
	n, ok := c.by[resource]
	if !ok {
		n = &informerCount{}
		c.by[resource] = n
	}
	return n
}

// set makes informer the source of the count.
func (c *informerCount) set(informer cache.SharedIndexInformer) { c.informer.Store(&informer) }

// objects is how many objects the informer holds, and false when there is
// no informer or it has not synced (the store then asks etcd).
func (c *informerCount) objects() (int64, bool) {
	if c == nil {
		return 0, false
	}
	p := c.informer.Load()
	if p == nil || !(*p).HasSynced() {
		return 0, false
	}
	return int64(len((*p).GetStore().ListKeys())), true
}
