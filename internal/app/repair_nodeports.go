package app

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/repair/report"
)

// nodePortRepair returns the node-port repair over the stored map at
// <prefix>/ranges/servicenodeports, with the range the map itself names (the
// job does not know the server's --service-node-port-range), or nil when
// there is no map (a cluster that never served node ports).
func (o *repairOptions) nodePortRepair(ctx context.Context, etcd *clientv3.Client, client kubernetes.Interface, recorder record.EventRecorder) (*repair.NodePortRepair, error) {
	m, found, err := nodeport.ReadStoredMap(ctx, etcd, etcdlayout.Layout{Prefix: o.cluster.etcdPrefix})
	if err != nil || !found {
		return nil, err
	}
	store, err := nodeport.NewEtcd(etcd, m.Key, m.Range, bitmap.EtcdOptions{})
	if err != nil {
		return nil, err
	}
	opts := o.shared(client, recorder)
	if stored, ok := opts.Services.(repair.StoredServices); ok && o.ipAddresses {
		// The IPAddress pass, which runs after this one (withNodePorts),
		// takes the Services this pass read rather than reading them again.
		stored.Handoff = o.handoff
		opts.Services = stored
	}
	return repair.NewNodePortRepair(repair.NodePortConfig{Options: opts, Store: store})
}

// withNodePorts runs the node-port pass and then the ClusterIP pass, as
// one report: the problems of both (the ClusterIP ones first, node-port
// ones marked Resource "nodePort"), writes and time added up. In the
// IPAddress model the ClusterIP pass takes the Services the node-port
// pass read from etcd (repair.ServicesHandoff); a map pass could not: it
// must read its Services after its map.
type withNodePorts struct {
	ips     passRunner
	ports   *repair.NodePortRepair
	handoff *repair.ServicesHandoff // nil when none
}

func (w withNodePorts) RunOnce(ctx context.Context) (*report.Report, error) {
	ports, err := w.ports.RunOnce(ctx)
	if err != nil {
		w.handoff.Take() // the read no pass will take is not kept until the next
		return nil, err
	}
	rep, err := w.ips.RunOnce(ctx)
	if err != nil {
		return nil, err
	}
	merged := *rep
	merged.Problems = append(append([]report.Problem(nil), rep.Problems...), ports.Problems...)
	merged.Writes += ports.Writes
	merged.Duration += ports.Duration
	return &merged, nil
}
