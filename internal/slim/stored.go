package slim

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// The apiVersions the walk sets, as the full decode sets them.
var (
	serviceAPIVersion   = etcdlayout.KindService.GroupVersion().String()
	ipAddressAPIVersion = etcdlayout.KindIPAddress.GroupVersion().String()
)

// StoredService decodes a Service as kube-apiserver stores it (a value of
// <prefix>/services/specs/...) into its slim copy, with the defaults the
// API server's decode applies to what the copy keeps.
func StoredService(data []byte) (*corev1.Service, error) {
	if raw, ok := Envelope(data, etcdlayout.KindService); ok {
		if svc, err := DecodeService(raw); err == nil {
			svc.APIVersion, svc.Kind = serviceAPIVersion, etcdlayout.KindService.Kind
			return svc, nil
		}
	}
	return fullService(data)
}

// fullService is StoredService for bytes the walk does not read: the full
// decode, defaulted, made slim.
func fullService(data []byte) (*corev1.Service, error) {
	svc, err := etcdlayout.DecodeService(data)
	if err != nil {
		return nil, err
	}
	setDefaults(svc)
	return Service(svc), nil
}

// setDefaults sets, on a fully decoded Service, what the API server's
// decode defaults of the fields a slim copy keeps, as the walk's fill
// does: the type, a port's protocol, the external traffic policy of a
// Service reachable from outside.
func setDefaults(svc *corev1.Service) {
	spec := &svc.Spec
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range spec.Ports {
		if spec.Ports[i].Protocol == "" {
			spec.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	reachable := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer ||
		spec.Type == corev1.ServiceTypeClusterIP && len(spec.ExternalIPs) > 0
	if reachable && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
}

// StoredIPAddress decodes an IPAddress as kube-apiserver stores it (v1, or
// v1beta1 converted) without its managedFields, its labels shared when
// they are an allocator's (CompactIPAddress).
func StoredIPAddress(data []byte) (*networkingv1.IPAddress, error) {
	if raw, ok := Envelope(data, etcdlayout.KindIPAddress); ok {
		if ipa, err := DecodeIPAddress(raw); err == nil {
			ipa.APIVersion, ipa.Kind = ipAddressAPIVersion, etcdlayout.KindIPAddress.Kind
			return ipa, nil
		}
	}
	return fullIPAddress(data)
}

// fullIPAddress is StoredIPAddress for bytes the walk does not read: the
// full decode, made compact.
func fullIPAddress(data []byte) (*networkingv1.IPAddress, error) {
	ipa, err := etcdlayout.DecodeIPAddress(data)
	if err != nil {
		return nil, err
	}
	return IPAddress(ipa), nil
}
