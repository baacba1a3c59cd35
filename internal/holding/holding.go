package holding

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// IPs returns the cluster IPs svc holds, each once, primary family first
// (the package doc has the table of cases).
func IPs(svc *corev1.Service) []netip.Addr {
	ips, _ := ClusterIPs(svc)
	return ips
}

// HoldsIP reports whether svc holds ip: whether IPs lists it. ip is
// compared as given; the addresses of IPAddress names and of the bitmap are
// never IPv4-mapped. It reads the fields ClusterIPs reads without building
// the list: the IPAddress repair asks it of every Service near each address.
func HoldsIP(svc *corev1.Service, ip netip.Addr) bool {
	texts, ok := clusterIPTexts(svc)
	if !ok {
		return false
	}
	for _, text := range texts {
		if held, ok := ParseClusterIP(text); ok && held == ip {
			return true
		}
	}
	return false
}

// clusterIPTexts returns the cluster IP fields ClusterIPs reads, false when
// svc names no address at all.
func clusterIPTexts(svc *corev1.Service) ([]string, bool) {
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, false
	}
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}, true
	}
	return svc.Spec.ClusterIPs, true
}

// ClusterIPs returns what svc's cluster IP fields name: ips, the addresses it
// holds, and invalid, the texts that name no address (ParseClusterIP), each
// once and in field order. ExternalName and headless Services name nothing;
// spec.clusterIPs is read, or spec.clusterIP alone when clusterIPs is empty;
// "" and "None" entries name nothing and are not invalid.
func ClusterIPs(svc *corev1.Service) (ips []netip.Addr, invalid []string) {
	return AppendClusterIPs(nil, svc)
}

// AppendClusterIPs is ClusterIPs with the addresses appended to ips: a
// caller reading every Service passes one slice for all of them.
func AppendClusterIPs(ips []netip.Addr, svc *corev1.Service) (_ []netip.Addr, invalid []string) {
	first := len(ips)
	texts, _ := clusterIPTexts(svc)
	for _, text := range texts {
		if text == "" || text == corev1.ClusterIPNone {
			continue
		}
		ip, ok := ParseClusterIP(text)
		switch {
		case !ok && !slices.Contains(invalid, text):
			invalid = append(invalid, text)
		case ok && !slices.Contains(ips[first:], ip):
			ips = append(ips, ip)
		}
	}
	return ips, invalid
}

// CanonicalText returns ip's canonical text (netip.Addr.String), taken
// from svc's cluster IP fields when one of them spells it so, as nearly
// every stored one does: a caller naming the address of every Service then
// allocates no text.
func CanonicalText(ip netip.Addr, svc *corev1.Service) string {
	var buf [48]byte
	text := ip.AppendTo(buf[:0])
	if svc.Spec.ClusterIP == string(text) {
		return svc.Spec.ClusterIP
	}
	for _, t := range svc.Spec.ClusterIPs {
		if t == string(text) {
			return t
		}
	}
	return string(text)
}

// ParseClusterIP reads one stored cluster IP: any spelling net/netip accepts
// without a zone, an IPv4-mapped IPv6 address being its IPv4 address. IPv4
// with leading zeros is invalid, as it is in an IPAddress name.
func ParseClusterIP(text string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(text)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// NodePorts returns the node ports svc holds, ascending, each once: for a
// NodePort or LoadBalancer Service every non-zero nodePort, and the
// healthCheckNodePort when NeedsHealthCheckNodePort; nothing for other types
// (the package doc has the table of cases).
func NodePorts(svc *corev1.Service) []int {
	if svc == nil || (svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer) {
		return nil
	}
	var out []int
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, int(p.NodePort))
		}
	}
	if NeedsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort != 0 {
		out = append(out, int(svc.Spec.HealthCheckNodePort))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// HoldsNodePort reports whether svc holds port: whether NodePorts lists it.
func HoldsNodePort(svc *corev1.Service, port int) bool {
	return slices.Contains(NodePorts(svc), port)
}

// NeedsHealthCheckNodePort reports whether svc gets a healthCheckNodePort:
// a LoadBalancer with externalTrafficPolicy Local.
func NeedsHealthCheckNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}
