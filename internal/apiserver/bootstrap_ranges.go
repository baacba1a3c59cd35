package apiserver

import (
	"context"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// servedRangesTimeout bounds how long bootstrap waits for the allocators to
// serve the kubernetes Service's address.
const servedRangesTimeout = 10 * time.Second

// rangeLister is implemented by allocators whose ranges come and go at run
// time (the IPAddress model: the ServiceCIDRs its informer has seen).
type rangeLister interface {
	Ranges() []netip.Prefix
}

// waitUntilServed waits, at most servedRangesTimeout, until every allocator
// of ip's family serves a range holding ip.
//
// Bootstrap creates the default ServiceCIDR and then at once the kubernetes
// Service on its first address. The IPAddress model learns ServiceCIDRs from
// an informer, so without this wait the Service's static allocation could run
// before the informer saw the new ServiceCIDR: the request would fail (422,
// retried 10 s later) and every fresh install would count one allocation
// error. It gives
// up silently on timeout, so a default ServiceCIDR that differs from the flag
// (left alone, and logged, by ensureDefaultServiceCIDR) cannot stall start-up.
func (s *Server) waitUntilServed(ctx context.Context, ip netip.Addr) {
	served := func() bool {
		for _, a := range s.allocators {
			lister, ok := a.(rangeLister)
			if !ok || a.IPv6() != ip.Is6() {
				continue
			}
			found := false
			for _, p := range lister.Ranges() {
				found = found || p.Contains(ip)
			}
			if !found {
				return false
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, servedRangesTimeout)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return served(), nil
	})
}
