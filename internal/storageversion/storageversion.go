// Package storageversion lets a scheme decode the older storage versions of
// the objects we serve: networking.k8s.io/v1beta1 IPAddress and ServiceCIDR.
//
// kube-apiserver 1.33 serves those two kinds as networking.k8s.io/v1 but
// still stores them as v1beta1 (v1 became the storage version in 1.34, so a
// 1.33 cluster could roll back to 1.32, which knows only v1beta1). A server
// that decodes only v1 never gets ready on a 1.33 cluster's etcd: the default
// ServiceCIDR "kubernetes" and every IPAddress fail to decode. AddToScheme
// registers the v1beta1 types and conversions to and from v1 in both
// directions; writers keep encoding v1.
//
// Invariant: the conversion copies every field. The v1beta1 and v1 types are
// field-for-field the same today; a test compares their shapes by reflection
// so that a field added to one of them in a future k8s.io/api fails the test
// instead of being dropped silently on the next update.
package storageversion

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	networkingv1beta1 "k8s.io/api/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
)

// NetworkingV1beta1 is the group-version kube-apiserver 1.31–1.33 stores
// IPAddress and ServiceCIDR in.
var NetworkingV1beta1 = networkingv1beta1.SchemeGroupVersion

// AddToScheme registers networking.k8s.io/v1beta1 IPAddress and ServiceCIDR
// (and their lists) in s with conversion functions to and from the v1 Go
// types. It registers no other v1beta1 kind: Ingress and the rest are not
// ours to decode.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(NetworkingV1beta1,
		&networkingv1beta1.IPAddress{}, &networkingv1beta1.IPAddressList{},
		&networkingv1beta1.ServiceCIDR{}, &networkingv1beta1.ServiceCIDRList{})
	funcs := []struct {
		a, b any
		fn   conversion.ConversionFunc
	}{
		{(*networkingv1beta1.IPAddress)(nil), (*networkingv1.IPAddress)(nil), func(a, b any, _ conversion.Scope) error {
			ipAddressToV1(a.(*networkingv1beta1.IPAddress), b.(*networkingv1.IPAddress))
			return nil
		}},
		{(*networkingv1.IPAddress)(nil), (*networkingv1beta1.IPAddress)(nil), func(a, b any, _ conversion.Scope) error {
			ipAddressToV1beta1(a.(*networkingv1.IPAddress), b.(*networkingv1beta1.IPAddress))
			return nil
		}},
		{(*networkingv1beta1.ServiceCIDR)(nil), (*networkingv1.ServiceCIDR)(nil), func(a, b any, _ conversion.Scope) error {
			serviceCIDRToV1(a.(*networkingv1beta1.ServiceCIDR), b.(*networkingv1.ServiceCIDR))
			return nil
		}},
		{(*networkingv1.ServiceCIDR)(nil), (*networkingv1beta1.ServiceCIDR)(nil), func(a, b any, _ conversion.Scope) error {
			serviceCIDRToV1beta1(a.(*networkingv1.ServiceCIDR), b.(*networkingv1beta1.ServiceCIDR))
			return nil
		}},
		{(*networkingv1beta1.IPAddressList)(nil), (*networkingv1.IPAddressList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*networkingv1beta1.IPAddressList), b.(*networkingv1.IPAddressList)
			out.ListMeta = in.ListMeta
			out.Items = make([]networkingv1.IPAddress, len(in.Items))
			for i := range in.Items {
				ipAddressToV1(&in.Items[i], &out.Items[i])
			}
			return nil
		}},
		{(*networkingv1beta1.ServiceCIDRList)(nil), (*networkingv1.ServiceCIDRList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*networkingv1beta1.ServiceCIDRList), b.(*networkingv1.ServiceCIDRList)
			out.ListMeta = in.ListMeta
			out.Items = make([]networkingv1.ServiceCIDR, len(in.Items))
			for i := range in.Items {
				serviceCIDRToV1(&in.Items[i], &out.Items[i])
			}
			return nil
		}},
	}
	for _, f := range funcs {
		if err := s.AddConversionFunc(f.a, f.b, f.fn); err != nil {
			return fmt.Errorf("register conversion %T to %T: %w", f.a, f.b, err)
		}
	}
	return nil
}

// The conversions deep-copy: the caller owns both objects afterwards.

func ipAddressToV1(in *networkingv1beta1.IPAddress, out *networkingv1.IPAddress) {
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = networkingv1.IPAddressSpec{}
	if p := in.Spec.ParentRef; p != nil {
		out.Spec.ParentRef = &networkingv1.ParentReference{Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name}
	}
}

func ipAddressToV1beta1(in *networkingv1.IPAddress, out *networkingv1beta1.IPAddress) {
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = networkingv1beta1.IPAddressSpec{}
	if p := in.Spec.ParentRef; p != nil {
		out.Spec.ParentRef = &networkingv1beta1.ParentReference{Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name}
	}
}

func serviceCIDRToV1(in *networkingv1beta1.ServiceCIDR, out *networkingv1.ServiceCIDR) {
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = networkingv1.ServiceCIDRSpec{CIDRs: cloneSlice(in.Spec.CIDRs)}
	out.Status = networkingv1.ServiceCIDRStatus{Conditions: cloneConditions(in.Status.Conditions)}
}

func serviceCIDRToV1beta1(in *networkingv1.ServiceCIDR, out *networkingv1beta1.ServiceCIDR) {
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = networkingv1beta1.ServiceCIDRSpec{CIDRs: cloneSlice(in.Spec.CIDRs)}
	out.Status = networkingv1beta1.ServiceCIDRStatus{Conditions: cloneConditions(in.Status.Conditions)}
}

func cloneSlice(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

func cloneConditions(cs []metav1.Condition) []metav1.Condition {
	if cs == nil {
		return nil
	}
	out := make([]metav1.Condition, len(cs))
	for i := range cs {
		cs[i].DeepCopyInto(&out[i])
	}
	return out
}
