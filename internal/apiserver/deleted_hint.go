package apiserver

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/registry/services"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// staticHint is the Service storage's warning for a user-chosen ClusterIP
// that only ServiceCIDRs being deleted hold: the allocator refuses it with
// kube-apiserver's "does not match the current range" (testdata/parity
// records that answer), and the warning says why. nil when the server
// allocates from its flag's range (the bitmap model), or answers as
// kube-apiserver does (--service-cidr-overlap-warnings=false).
//
// The ServiceCIDR informer files those being deleted under an index of
// their own (deletingIndex), so that a create looks at them alone, and at
// every ServiceCIDR only when one being deleted holds its address.
func (c CompletedConfig) staticHint(s *Server) services.StaticHint {
	if !c.ServiceCIDROverlapWarnings || s.backend == nil || !s.backend.AllocatesFromServiceCIDRs() {
		return nil
	}
	informer := s.informers.Networking().V1().ServiceCIDRs()
	deleting := func() ([]any, error) {
		return informer.Informer().GetIndexer().ByIndex(deletingIndex, deletingIndex)
	}
	if err := informer.Informer().AddIndexers(cache.Indexers{deletingIndex: indexDeleting}); err != nil {
		deleting = nil // an informer already started: every create reads them all
	}
	return deletedHint(deleting, func() ([]*networkingv1.ServiceCIDR, error) {
		return informer.Lister().List(labels.Everything())
	})
}

// deletingIndex is the index, and its one value, of the ServiceCIDRs being
// deleted.
const deletingIndex = "deleting"

func indexDeleting(obj any) ([]string, error) {
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok && sc.DeletionTimestamp != nil {
		return []string{deletingIndex}, nil
	}
	return nil, nil
}

// deletedHint warns of ip when only ServiceCIDRs being deleted hold it
// (ipaddress.DeletedHolders over all of them). A ServiceCIDR being deleted
// is never ready, so when none of those deleting returns holds ip (a nil
// deleting: not known), the answer is no warning without reading all.
func deletedHint(deleting func() ([]any, error), all func() ([]*networkingv1.ServiceCIDR, error)) services.StaticHint {
	return func(ip netip.Addr) string {
		if deleting != nil {
			if objs, err := deleting(); err == nil {
				list := make([]*networkingv1.ServiceCIDR, 0, len(objs))
				for _, o := range objs {
					if sc, ok := o.(*networkingv1.ServiceCIDR); ok {
						list = append(list, sc)
					}
				}
				if len(ipaddress.DeletedHolders(list, ip)) == 0 {
					return ""
				}
			}
		}
		list, err := all()
		if err != nil {
			return ""
		}
		if names := ipaddress.DeletedHolders(list, ip); len(names) > 0 {
			return ipaddress.DeletedWarning(ip, names)
		}
		return ""
	}
}
