package apiserver

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/internal/registry/services"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// staticHint is the Service storage's warning for a user-chosen ClusterIP
// that only ServiceCIDRs being deleted hold: the allocator refuses it with
// kube-apiserver's "does not match the current range" (testdata/parity
// records that answer), and the warning says why. nil when the server
// allocates from its flag's range (the bitmap model), or answers as
// kube-apiserver does (--service-cidr-overlap-warnings=false).
func (c CompletedConfig) staticHint(s *Server) services.StaticHint {
	if !c.ServiceCIDROverlapWarnings || s.backend == nil || !s.backend.AllocatesFromServiceCIDRs() {
		return nil
	}
	cidrs := s.informers.Networking().V1().ServiceCIDRs().Lister()
	return func(ip netip.Addr) string {
		list, err := cidrs.List(labels.Everything())
		if err != nil {
			return ""
		}
		if names := ipaddress.DeletedHolders(list, ip); len(names) > 0 {
			return ipaddress.DeletedWarning(ip, names)
		}
		return ""
	}
}
