package ipaddress

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
)

// NewObject returns the IPAddress that claims ip for owner, exactly as
// kube-apiserver writes it: the canonical address as name, the family and
// managed-by labels, and a parentRef to the Service.
func NewObject(ip netip.Addr, owner allocation.Owner) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip.String(),
			Labels: map[string]string{
				LabelIPFamily:  familyOf(ip.Is6()),
				LabelManagedBy: ManagedBy,
			},
		},
		Spec: networkingv1.IPAddressSpec{
			ParentRef: &networkingv1.ParentReference{
				Group: "", Resource: "services", Namespace: owner.Namespace, Name: owner.Name,
			},
		},
	}
}

// OwnedBy reports whether obj's parentRef is owner's Service.
func OwnedBy(obj *networkingv1.IPAddress, owner allocation.Owner) bool {
	p := obj.Spec.ParentRef
	return p != nil && p.Group == "" && p.Resource == "services" &&
		p.Namespace == owner.Namespace && p.Name == owner.Name
}

// IsManaged reports whether obj was created by a ClusterIP allocator (ours or
// kube-apiserver's), as opposed to another component.
func IsManaged(obj *networkingv1.IPAddress) bool {
	return obj.Labels[LabelManagedBy] == ManagedBy
}
