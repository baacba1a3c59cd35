package subrange

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrInvalid matches every parse error of this package with errors.Is.
var ErrInvalid = errors.New("invalid address")

// ParseError says why a text is not a canonical IP address or CIDR.
type ParseError struct {
	// Input is the text that was refused.
	Input string
	// What is "IP" or "CIDR".
	What string
	// Reason explains the refusal in a few words.
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.What, e.Input, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for every *ParseError.
func (e *ParseError) Is(target error) bool { return target == ErrInvalid }

// ParseAddr parses s as a canonical IP address (see the package doc).
func ParseAddr(s string) (netip.Addr, error) {
	fail := func(reason string, args ...any) (netip.Addr, error) {
		return netip.Addr{}, &ParseError{Input: s, What: "IP", Reason: fmt.Sprintf(reason, args...)}
	}
	if s == "" {
		return fail("empty")
	}
	if strings.Contains(s, "/") {
		return fail("a CIDR where an IP address is expected")
	}
	if strings.Contains(s, "%") {
		return fail("zones are not allowed")
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		if hasLeadingZeroOctet(s) {
			return fail("leading zeros are not allowed")
		}
		return fail("not an IP address")
	}
	if addr.Is4In6() {
		return fail("IPv4-mapped IPv6 addresses are not allowed, use %s", addr.Unmap())
	}
	if canonical := addr.String(); canonical != s {
		return fail("not in canonical form, use %s", canonical)
	}
	return addr, nil
}

// ParsePrefix parses s as a canonical CIDR (see the package doc).
func ParsePrefix(s string) (netip.Prefix, error) {
	fail := func(reason string, args ...any) (netip.Prefix, error) {
		return netip.Prefix{}, &ParseError{Input: s, What: "CIDR", Reason: fmt.Sprintf(reason, args...)}
	}
	if s == "" {
		return fail("empty")
	}
	addrText, _, found := strings.Cut(s, "/")
	if !found {
		return fail("an IP address where a CIDR is expected")
	}
	if strings.Contains(addrText, "%") {
		return fail("zones are not allowed")
	}
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		if hasLeadingZeroOctet(addrText) {
			return fail("leading zeros are not allowed")
		}
		return fail("not a CIDR")
	}
	if prefix.Addr().Is4In6() {
		return fail("IPv4-mapped IPv6 addresses are not allowed")
	}
	if masked := prefix.Masked(); masked != prefix {
		return fail("host bits are set, the network is %s", masked)
	}
	// The canonical text is formatted into a buffer on the stack: the
	// IPAddress allocator's first build of its ranges parses every
	// ServiceCIDR's CIDRs.
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	if string(prefix.AppendTo(buf[:0])) != s {
		return fail("not in canonical form, use %s", prefix)
	}
	return prefix, nil
}

// hasLeadingZeroOctet reports whether a dotted-quad text has an octet such as
// "01"; it only sharpens the error message.
func hasLeadingZeroOctet(s string) bool {
	if strings.Contains(s, ":") {
		// An IPv4 tail of an IPv6 address is the only dotted part.
		s = s[strings.LastIndex(s, ":")+1:]
	}
	for _, octet := range strings.Split(s, ".") {
		if len(octet) > 1 && octet[0] == '0' {
			return true
		}
	}
	return false
}
