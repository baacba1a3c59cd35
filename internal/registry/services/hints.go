package services

import (
	"context"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
)

// warnRequested sends the client the hint's warning for each ClusterIP svc
// asks for that old (nil on a create) does not hold. A warning goes out with
// the answer whether the write succeeds or not, so it stands beside the
// allocator's refusal.
func (r *REST) warnRequested(ctx context.Context, svc *corev1.Service, old *corev1.Service) {
	if r.hint == nil {
		return
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, text := range ips {
		ip, err := netip.ParseAddr(text)
		if err != nil || (old != nil && (slices.Contains(old.Spec.ClusterIPs, text) || old.Spec.ClusterIP == text)) {
			continue
		}
		if w := r.hint(ip); w != "" {
			warning.AddWarning(ctx, "", w)
		}
	}
}

// hintedInfo is an update's object, which warns of the ClusterIPs it asks
// for once it is known (the store may ask for it again on a conflict; the
// warning recorder keeps each text once).
type hintedInfo struct {
	rest.UpdatedObjectInfo
	r *REST
}

func (h hintedInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := h.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if svc, ok := obj.(*corev1.Service); ok && err == nil {
		old, _ := oldObj.(*corev1.Service)
		h.r.warnRequested(ctx, svc, old)
	}
	return obj, err
}
