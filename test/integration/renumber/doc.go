// Package renumber tests `allocator renumber` (internal/renumber) against the
// real API server in-process (internal/testserver), in the IPAddress model:
// a thousand Services over ten namespaces moved out of a draining
// ServiceCIDR by the built binary, killed part-way and resumed from its
// journal; moves into a chosen ServiceCIDR (--to); dual-stack Services that
// keep their other family's address; static-band addresses that keep their
// offset (kube-dns at .10, with the kubelet's clusterDNS steps); Services
// left untouched; and the documented replacement of the default range,
// servers restarted on the same etcd with a new --service-cluster-ip-range.
package renumber
