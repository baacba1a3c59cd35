package apiserver

import (
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
)

// repairServices is the Service source of the server's map-based repairs
// (the node-port repair, the bitmap repair): the Service informer's store
// once it has caught up with etcd (repair.InformerServices), when the
// server runs that informer (the IPAddress model, or a transition), else
// nil, the paged list. The bitmap model alone starts no informer for it:
// one would hold every Service for good to save a list's transient cost
// every few minutes.
func (s *Server) repairServices(client kubernetes.Interface) repair.ServiceSource {
	if s.serviceInformer == nil || s.etcd == nil {
		return nil
	}
	return repair.InformerServices{Informer: s.serviceInformer, Etcd: s.etcd,
		Prefix: etcdlayout.Layout{Prefix: s.cfg.EtcdPrefix}.ServicesPrefix(),
		List:   repair.Options{Client: client}.ListServices}
}
