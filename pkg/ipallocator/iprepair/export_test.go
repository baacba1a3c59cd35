package iprepair

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Hooks into unexported parts for the external tests (package repair_test),
// which must be external because they start the real API server, and the
// server imports this package.

// ErrChanged is errChanged.
var ErrChanged = errChanged

// ReconcileOnStaleSnapshot reconciles ip from a snapshot in which no Service
// holds it and ipa is its IPAddress, as a lagging cache would show, and
// returns how many writes it made.
func (r *IPAddressRepair) ReconcileOnStaleSnapshot(ctx context.Context, ip string, ipa *networkingv1.IPAddress, cidrs ...string) (int, error) {
	stale := &listView{
		byKey:    map[string][]*corev1.Service{},
		services: map[string]*corev1.Service{},
		ips:      map[string]*networkingv1.IPAddress{ip: ipa},
		ranges:   newServiceCIDRs([]*networkingv1.ServiceCIDR{{Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}}),
	}
	out, err := r.reconcile(ctx, stale, ip)
	return out.writes, err
}

// DeleteIfUnchanged is deleteIfUnchanged.
func (r *IPAddressRepair) DeleteIfUnchanged(ctx context.Context, ipa *networkingv1.IPAddress) error {
	return r.deleteIfUnchanged(ctx, ipa)
}
