package ipallocator

import (
	"fmt"
	"net/netip"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// bitmapMinIPv6Bits is kube-apiserver's limit on an IPv6 service range in the
// bitmap model.
const bitmapMinIPv6Bits = 108

// ServiceRange is the usable range of a --service-cluster-ip-range prefix
// under m. It refuses what kube-apiserver's flag check refuses for that model
// (in the bitmap model, an IPv6 prefix shorter than /108) as well as what
// subrange.New refuses; an error of the first kind names the prefix first.
func ServiceRange(m model.Name, prefix netip.Prefix) (subrange.Range, error) {
	if m == model.Bitmap && prefix.Addr().Is6() && prefix.Bits() < bitmapMinIPv6Bits {
		return subrange.Range{}, &FlagRangeError{Prefix: prefix,
			Reason: fmt.Sprintf("the bitmap model needs an IPv6 prefix of /%d or longer", bitmapMinIPv6Bits)}
	}
	return subrange.New(prefix, m)
}

// FlagRangeError is a service range kube-apiserver's flag check refuses for
// a model although its address math could serve it.
type FlagRangeError struct {
	Prefix netip.Prefix
	Reason string
}

func (e *FlagRangeError) Error() string { return fmt.Sprintf("%s: %s", e.Prefix, e.Reason) }

// HonoursScopes reports whether the model's allocators route a Service to
// its scoped ServiceCIDRs (pkg/ipaddress/scope): the IPAddress model does; the bitmap
// model serves one range per family and ignores scopes.
func HonoursScopes(m model.Name) bool { return m == model.IPAddress }

// HonoursLifecycles reports whether the model's allocators apply the
// ServiceCIDR lifecycle annotations (pkg/ipaddress/lifecycle): the IPAddress model
// does; the bitmap model serves one range per family and ignores them.
func HonoursLifecycles(m model.Name) bool { return m == model.IPAddress }
