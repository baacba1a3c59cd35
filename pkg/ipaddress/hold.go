package ipaddress

import "net/netip"

// Forget frees ip in the allocator's view when its informer has not seen an
// IPAddress for it since this allocator claimed it: a claim that Objects
// recorded without storing an IPAddress, and that nobody stored since. The
// admission webhook claims so (internal/webhook): it picks an address that
// kube-apiserver then allocates as the user's choice, and forgets the pick
// once kube-apiserver has not done so within a hold. An address the
// informer has seen, or that is being claimed, is kept.
func (a *Allocator) Forget(ip netip.Addr) {
	a.lock()
	defer a.mu.Unlock()
	if a.inflight[ip] != nil || !a.unobserved[ip] {
		return
	}
	delete(a.unobserved, ip)
	a.markLocked(ip, false)
}
