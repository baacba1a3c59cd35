package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/ipallocator/dualwrite"
	"github.com/allocator/allocator/pkg/ipallocator/ipaddress"
	"github.com/allocator/allocator/pkg/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// IPAddressFactory builds the IPAddress model: one meta-allocator per family
// over every ready ServiceCIDR, claiming addresses by creating IPAddress
// objects through the server's own loopback client. Its informers start at
// once and sync once the server serves; until then it answers ErrNotReady
// (503 with Retry-After). The informers stop when ctx ends.
func IPAddressFactory(ctx context.Context, spec AllocatorSpec) (allocation.Interface, error) {
	client, err := loopbackClient(spec)
	if err != nil {
		return nil, err
	}
	// A ServiceCIDR the allocator cannot serve (an IPv6 prefix shorter than
	// /64) is accepted by the API like upstream's, so the refusal is made
	// visible as a Warning event on it, with upstream's message.
	recorder := report.NewEventRecorder(ctx, client)
	onRefused := func(r ipaddress.RefusedCIDR) {
		obj := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: r.ServiceCIDR}}
		recorder.Eventf(obj, corev1.EventTypeWarning, ReasonServiceCIDRNotServed, "CIDR %s is not served: %v", r.CIDR, r.Err)
	}
	ipa, err := ipaddress.New(ctx, ipaddress.Config{Client: client, IPv6: spec.Prefix.Addr().Is6(), OnRefused: onRefused})
	if err != nil || spec.Transition == nil {
		return ipa, err
	}
	// Dual write (pkg/ipallocator/dualwrite) over the bitmap of the flag's range, which
	// a bitmap-model replica of this cluster would use.
	rng, err := subrange.New(spec.Prefix, subrange.ModelBitmap)
	if err != nil {
		logger(ctx).Info("The service range cannot have a bitmap; its family is never dual-written", "range", spec.Prefix, "err", err)
		return ipa, nil
	}
	bits, err := bitmap.NewEtcdAllocator(spec.Etcd, spec.RangeKey(), rng, bitmap.EtcdOptions{})
	if err != nil {
		return nil, fmt.Errorf("dual-write bitmap for %s: %w", spec.Prefix, err)
	}
	if spec.Transition.DualWrite() {
		if _, err := bits.Initialize(ctx); err != nil {
			return nil, fmt.Errorf("dual-write bitmap for %s: %w", spec.Prefix, err)
		}
	}
	return dualwrite.New(ipa, bits, spec.Transition)
}

// loopbackClient is a protobuf client on the server's loopback config: every
// dynamic allocation is one IPAddress create through it, and the informers
// list and watch through it.
func loopbackClient(spec AllocatorSpec) (kubernetes.Interface, error) {
	if spec.Loopback == nil {
		return nil, fmt.Errorf("allocator for %s: no loopback client config", spec.Prefix)
	}
	cfg := restclient.CopyConfig(spec.Loopback)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("allocator for %s: %w", spec.Prefix, err)
	}
	return client, nil
}

// ReasonServiceCIDRNotServed is the reason of the event on a ServiceCIDR the
// IPAddress allocator refuses to serve.
const ReasonServiceCIDRNotServed = "ServiceCIDRNotServed"
