package rangeusage

import (
	"context"
	"fmt"
	"path"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// SourceServices is NodePorts.Source, and Usage.CountedFrom, when the
// counts are what the Services hold, listed through the API.
const SourceServices = "Services"

// NodePorts is the fill of the node-port range (--service-node-port-range),
// which both ClusterIP models share.
type NodePorts struct {
	// Range is the range measured: the one the map records, or the one
	// given for counting the Services.
	Range nodeport.Range
	// Source names what the counts come from: "RangeAllocation/servicenodeports"
	// (the map in etcd) or SourceServices (the node ports the
	// Services hold, listed through the API; a leaked port is not seen).
	Source string
	// Static is the lower band kept for user-chosen ports
	// (nodeport.StaticBandSize), Dynamic the rest.
	Static, Dynamic Band
	// Outside counts the node ports Services hold outside Range (counted
	// from the Services only: the map has no slot for them).
	Outside uint64
	// Namespaces are the holders of the ports, most ports first; a port of
	// the map that no Service holds is NoNamespace's.
	Namespaces []NamespaceCount
}

// Total is the fill of the whole range.
func (n *NodePorts) Total() Band {
	return Band{Size: n.Static.Size + n.Dynamic.Size, Used: n.Static.Used + n.Dynamic.Used}
}

// NodePortsFromMap measures the node-port map at
// <prefix>/ranges/servicenodeports on the range the map records, read with
// a plain Get (never through an allocator, which may write); the Services,
// listed through the API, say which namespace holds each port. found is
// false when no map is stored (no server ever allocated node ports there).
func NodePortsFromMap(ctx context.Context, kv clientv3.KV, prefix string, client kubernetes.Interface) (usage *NodePorts, found bool, err error) {
	m, found, err := nodeport.ReadStoredMap(ctx, kv, etcdlayout.Layout{Prefix: prefix})
	if err != nil || !found {
		return nil, false, err
	}
	key, rng := m.Key, m.Range
	bits, err := bitset.New(rng.Size(), rng.StaticSize())
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", key, err)
	}
	if err := bits.SetBytes(m.Data); err != nil {
		return nil, false, fmt.Errorf("%s: %w", key, err)
	}
	owners, err := serviceNodePorts(ctx, client)
	if err != nil {
		return nil, false, err
	}
	var ports []heldPort
	bits.ForEach(func(i int) {
		port, _ := rng.Port(i)
		ports = append(ports, heldPort{port: port, namespace: owners[port]})
	})
	return countNodePorts(rng, "RangeAllocation/"+path.Base(key), ports), true, nil
}

// NodePortsFromServices measures rng against the node ports the Services
// hold (holding.NodePorts), listed through the API: how node ports are
// measured without etcd.
func NodePortsFromServices(ctx context.Context, client kubernetes.Interface, rng nodeport.Range) (*NodePorts, error) {
	owners, err := serviceNodePorts(ctx, client)
	if err != nil {
		return nil, err
	}
	ports := make([]heldPort, 0, len(owners))
	for port, ns := range owners {
		ports = append(ports, heldPort{port: port, namespace: ns})
	}
	return countNodePorts(rng, SourceServices, ports), nil
}

// heldPort is one allocated node port and the namespace holding it ("" when
// no Service does).
type heldPort struct {
	port      int
	namespace string
}

// countNodePorts counts each port once, in its band or as outside rng.
func countNodePorts(rng nodeport.Range, source string, ports []heldPort) *NodePorts {
	static := rng.StaticSize()
	out := &NodePorts{Range: rng, Source: source,
		Static: Band{Size: uint64(static)}, Dynamic: Band{Size: uint64(rng.Size() - static)}}
	perNamespace := map[string]uint64{}
	for _, p := range ports {
		i, ok := rng.Index(p.port)
		switch {
		case !ok:
			out.Outside++
			continue
		case i < static:
			out.Static.Used++
		default:
			out.Dynamic.Used++
		}
		ns := p.namespace
		if ns == "" {
			ns = NoNamespace
		}
		perNamespace[ns]++
	}
	for ns, n := range perNamespace {
		out.Namespaces = append(out.Namespaces, NamespaceCount{Namespace: ns, Used: n})
	}
	sortNamespaces(out.Namespaces)
	return out
}

// serviceNodePorts maps every node port a Service holds to the Service's
// namespace.
func serviceNodePorts(ctx context.Context, client kubernetes.Interface) (map[int]string, error) {
	owners := map[int]string{}
	err := eachService(ctx, client, func(svc *corev1.Service) {
		for _, port := range holding.NodePorts(svc) {
			owners[port] = svc.Namespace
		}
	})
	return owners, err
}
