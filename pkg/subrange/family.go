package subrange

// IPv4 and IPv6 are the IP families as Kubernetes spells them: the values of
// core/v1 IPFamily and of the ipaddress.kubernetes.io/ip-family label.
const (
	IPv4 = "IPv4"
	IPv6 = "IPv6"
)

// FamilyName is the name of the IPv6 family when ipv6 is true, else of
// IPv4's. It takes what netip.Addr.Is6 and Range.IPv6 report, so an
// IPv4-mapped IPv6 address (which subrange never accepts as canonical)
// names IPv6, as its text, with colons, does.
func FamilyName(ipv6 bool) string {
	if ipv6 {
		return IPv6
	}
	return IPv4
}
