package ipaddress

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/subrange"
)

// AnnotationServiceUID records the UID of the Service an IPAddress was
// claimed for (its parentRef names the Service but has no UID field).
// kube-apiserver neither writes nor reads it, and keeps it as any annotation.
const AnnotationServiceUID = "allocator.github.io/service-uid"

// NewObject returns the IPAddress that claims ip for owner as kube-apiserver
// writes it (the canonical address as name, the family and managed-by
// labels, a parentRef to the Service), with owner's UID, when known, as
// the AnnotationServiceUID annotation.
func NewObject(ip netip.Addr, owner allocation.Owner) *networkingv1.IPAddress {
	var annotations map[string]string
	if owner.UID != "" {
		annotations = map[string]string{AnnotationServiceUID: owner.UID}
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip.String(),
			Labels: map[string]string{
				LabelIPFamily:  subrange.FamilyName(ip.Is6()),
				LabelManagedBy: ManagedBy,
			},
			Annotations: annotations,
		},
		Spec: networkingv1.IPAddressSpec{
			ParentRef: &networkingv1.ParentReference{
				Group: "", Resource: "services", Namespace: owner.Namespace, Name: owner.Name,
			},
		},
	}
}

// ParentIsService reports whether obj's parentRef names a core Service
// (group "", resource services), the only parent a ClusterIP allocator
// writes.
func ParentIsService(obj *networkingv1.IPAddress) bool {
	p := obj.Spec.ParentRef
	return p != nil && p.Group == "" && p.Resource == "services"
}

// Parent spells obj's parentRef for a message: "namespace/name" for a
// Service, "group/resource/namespace/name" for another parent, "no parent".
func Parent(obj *networkingv1.IPAddress) string {
	p := obj.Spec.ParentRef
	switch {
	case p == nil:
		return "no parent"
	case ParentIsService(obj):
		return p.Namespace + "/" + p.Name
	default:
		return p.Group + "/" + p.Resource + "/" + p.Namespace + "/" + p.Name
	}
}

// OwnedBy reports whether obj's parentRef is owner's Service and, when both
// obj and owner carry a Service UID, whether it is the same Service: an
// IPAddress kube-apiserver wrote (no UID recorded), or an owner whose UID is
// not known, is judged by namespace and name alone.
func OwnedBy(obj *networkingv1.IPAddress, owner allocation.Owner) bool {
	if !ParentIsService(obj) {
		return false
	}
	if p := obj.Spec.ParentRef; p.Namespace != owner.Namespace || p.Name != owner.Name {
		return false
	}
	uid := obj.Annotations[AnnotationServiceUID]
	return uid == "" || owner.UID == "" || uid == owner.UID
}

// IsManaged reports whether obj was created by a ClusterIP allocator (ours or
// kube-apiserver's), as opposed to another component.
func IsManaged(obj *networkingv1.IPAddress) bool {
	return obj.Labels[LabelManagedBy] == ManagedBy
}
