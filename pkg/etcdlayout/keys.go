package etcdlayout

import (
	"path"
	"strings"
)

// DefaultPrefix is kube-apiserver's default --etcd-prefix.
const DefaultPrefix = "/registry"

// The paths of the resources below the prefix, as kube-apiserver's storage
// factory sets them (its resource prefixes). The API server's stores use
// them, and every key of Layout is built from them.
const (
	ServicesPath     = "services/specs"
	NamespacesPath   = "namespaces"
	EventsPath       = "events"
	IPAddressesPath  = "ipaddresses"
	ServiceCIDRsPath = "servicecidrs"
	rangesPath       = "ranges"
)

// LayoutOfRange returns the Layout whose RangeAllocation key is key
// (<prefix>/ranges/<name>), so the Services of the same cluster can be found
// from a map's key alone; a key with no "/ranges/" part gives the zero
// Layout (DefaultPrefix).
func LayoutOfRange(key string) Layout {
	if i := strings.LastIndex(key, "/"+rangesPath+"/"); i >= 0 {
		return Layout{Prefix: "/" + key[:i]} // "/" for the root of the keyspace
	}
	return Layout{}
}

// Layout computes etcd keys under a prefix. The zero value uses DefaultPrefix.
type Layout struct {
	// Prefix is the etcd prefix, as given to kube-apiserver's --etcd-prefix.
	// Empty means DefaultPrefix.
	Prefix string
}

// Root returns the normalised prefix: a leading slash, no trailing slash, no
// repeated slashes ("/registry"); "/" for the root of the keyspace.
func (l Layout) Root() string {
	p := l.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	return path.Join("/", p)
}

// key joins the prefix and a resource path the way kube-apiserver does.
func (l Layout) key(parts ...string) string {
	root := l.Root()
	if !strings.HasSuffix(root, "/") {
		root += "/"
	}
	return root + strings.Join(parts, "/")
}

// PrimaryServiceIPRange is the key of the RangeAllocation for the cluster's
// first IP family: <prefix>/ranges/serviceips.
func (l Layout) PrimaryServiceIPRange() string { return l.key(rangesPath, "serviceips") }

// SecondaryServiceIPRange is the key of the RangeAllocation for the cluster's
// second IP family: <prefix>/ranges/secondaryserviceips.
func (l Layout) SecondaryServiceIPRange() string { return l.key(rangesPath, "secondaryserviceips") }

// ServiceNodePortRange is the key of the NodePort RangeAllocation:
// <prefix>/ranges/servicenodeports.
func (l Layout) ServiceNodePortRange() string { return l.key(rangesPath, "servicenodeports") }

// RangesPrefix is the list prefix of every RangeAllocation: <prefix>/ranges/.
func (l Layout) RangesPrefix() string { return l.key(rangesPath, "") }

// Service is the key of a Service: <prefix>/services/specs/<ns>/<name>.
func (l Layout) Service(namespace, name string) string {
	return l.key(ServicesPath, namespace, name)
}

// ServicesPrefix is the list prefix of all Services: <prefix>/services/specs/.
func (l Layout) ServicesPrefix() string { return l.key(ServicesPath, "") }

// ServicesInNamespacePrefix is the list prefix of the Services in one
// namespace: <prefix>/services/specs/<ns>/.
func (l Layout) ServicesInNamespacePrefix(namespace string) string {
	return l.key(ServicesPath, namespace, "")
}

// IPAddress is the key of an IPAddress object: <prefix>/ipaddresses/<name>.
// The name must be the IP in canonical form.
func (l Layout) IPAddress(name string) string { return l.key(IPAddressesPath, name) }

// IPAddressesPrefix is the list prefix of all IPAddresses: <prefix>/ipaddresses/.
func (l Layout) IPAddressesPrefix() string { return l.key(IPAddressesPath, "") }

// ServiceCIDR is the key of a ServiceCIDR: <prefix>/servicecidrs/<name>.
func (l Layout) ServiceCIDR(name string) string { return l.key(ServiceCIDRsPath, name) }

// ServiceCIDRsPrefix is the list prefix of all ServiceCIDRs: <prefix>/servicecidrs/.
func (l Layout) ServiceCIDRsPrefix() string { return l.key(ServiceCIDRsPath, "") }

// Namespace is the key of a Namespace: <prefix>/namespaces/<name>.
func (l Layout) Namespace(name string) string { return l.key(NamespacesPath, name) }

// NamespacesPrefix is the list prefix of all Namespaces: <prefix>/namespaces/.
func (l Layout) NamespacesPrefix() string { return l.key(NamespacesPath, "") }

// LeasesInNamespacePrefix is the prefix of the Leases of one namespace
// (kube-apiserver's identity leases are in kube-system).
func (l Layout) LeasesInNamespacePrefix(namespace string) string {
	return l.key("leases", namespace, "")
}

// AllocatorState is this project's own key holding the cluster-wide
// ClusterIP allocator transition state (no kube-apiserver resource lives
// under "clusterip-allocator").
func (l Layout) AllocatorState() string { return l.key("clusterip-allocator", "state") }

// RestoreMarker is this project's own key through which one server process
// notices etcd going back in time (a restore from a backup): it advances a
// counter there and expects to read back what it last wrote.
func (l Layout) RestoreMarker(process string) string {
	return l.key("clusterip-allocator", "markers", process)
}

// Fence is this project's own key that fences the Service writes of one
// request (internal/fence): while it exists, none of them can be applied.
func (l Layout) Fence(token string) string {
	return l.key("clusterip-allocator", "fences", token)
}

// WriteLease is this project's own key that registers one write lease of a
// server (internal/fence): it carries the lease, so it exists exactly while
// a write made with that lease may still be applied.
func (l Layout) WriteLease(name string) string {
	return l.key("clusterip-allocator", "write-leases", name)
}

// WriteLeasesPrefix is the prefix of the WriteLease keys.
func (l Layout) WriteLeasesPrefix() string {
	return l.key("clusterip-allocator", "write-leases", "")
}

// MapStamp is this project's own key beside the RangeAllocation at rangeKey
// (<prefix>/ranges/<name>): a random stamp that every write of the map by
// this server replaces in the same transaction, and every compare-and-swap
// of it compares (pkg/bitmap, stamp.go). A key with no "/ranges/" part (a
// test's) gets a stamp under DefaultPrefix named by the whole key.
func MapStamp(rangeKey string) string {
	name := strings.Trim(rangeKey, "/")
	if i := strings.LastIndex(rangeKey, "/"+rangesPath+"/"); i >= 0 {
		name = rangeKey[i+len(rangesPath)+2:]
	}
	return LayoutOfRange(rangeKey).key("clusterip-allocator", "stamps", name)
}

// WarmStart is this project's own key that a clean shutdown of serve writes
// beside its warm-start files (internal/warmstart): a start uses them only
// while etcd still holds that write.
func (l Layout) WarmStart() string { return l.key("clusterip-allocator", "warm-start") }

// ListHold is this project's own key through which one server process
// holds etcd's compaction back for the paged lists it serves
// (internal/listhold): the oldest revision they are read at, on a lease.
func (l Layout) ListHold(process string) string {
	return l.key("clusterip-allocator", "list-holds", process)
}

// ListHoldsPrefix is the prefix of the ListHold keys.
func (l Layout) ListHoldsPrefix() string {
	return l.key("clusterip-allocator", "list-holds", "")
}

// AllocatorReplicasPrefix is the prefix of the replica records of one
// allocator model (empty model: of every model).
func (l Layout) AllocatorReplicasPrefix(model string) string {
	if model == "" {
		return l.key("clusterip-allocator", "replicas", "")
	}
	return l.key("clusterip-allocator", "replicas", model, "")
}
