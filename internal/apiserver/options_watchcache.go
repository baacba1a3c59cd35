package apiserver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultWatchCacheSizes turn the watch cache off for the Services and the
// IPAddresses. The server's own informers (allocators, repairs, the
// ServiceCIDR controller) hold every one of them already; a watch cache
// would hold a second decoded copy, with its managedFields, larger than
// the informers' (docs/performance.md has the figures). Without it their lists, gets and watches read etcd: a
// page of a list reads the page's keys (a watch cache answers every page
// after the first at a cost that grows with the objects stored), a watch is
// an etcd watch of its own, decoded for its watcher. That suits the
// server's watchers (its informers, one per resource, and kubectl); many
// watchers of Services (every node's kube-proxy) would want the cache back:
// --watch-cache-sizes=services#100.
var DefaultWatchCacheSizes = []string{"services#0", "ipaddresses.networking.k8s.io#0"}

// watchCacheResources are the resources --watch-cache-sizes may name.
var watchCacheResources = []schema.GroupResource{
	corev1.Resource("services"), corev1.Resource("namespaces"), corev1.Resource("events"),
	networkingv1.Resource("ipaddresses"), networkingv1.Resource("servicecidrs"),
}

// ParseWatchCacheSizes reads kube-apiserver's --watch-cache-sizes syntax,
// RESOURCE[.GROUP]#SIZE: a size of 0 serves the resource without a watch
// cache; any other size, or a resource not named, with one (this server's
// watch cache grows as needed, as kube-apiserver's does, so the size is
// otherwise unused). It returns the resources without one.
func ParseWatchCacheSizes(entries []string) (map[schema.GroupResource]bool, error) {
	off := map[schema.GroupResource]bool{}
	for _, e := range entries {
		name, sizeText, ok := strings.Cut(e, "#")
		if !ok {
			return nil, fmt.Errorf("--watch-cache-sizes %q: want RESOURCE[.GROUP]#SIZE", e)
		}
		size, err := strconv.Atoi(sizeText)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("--watch-cache-sizes %q: the size must be a number, 0 or more", e)
		}
		gr := schema.ParseGroupResource(name)
		if !slices.Contains(watchCacheResources, gr) {
			return nil, fmt.Errorf("--watch-cache-sizes %q: this server serves %s", e, resourceNames())
		}
		if size == 0 {
			off[gr] = true
		} else {
			delete(off, gr)
		}
	}
	return off, nil
}

func resourceNames() string {
	names := make([]string, len(watchCacheResources))
	for i, gr := range watchCacheResources {
		names[i] = gr.String()
	}
	return strings.Join(names, ", ")
}
