package servicecidrs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/pkg/subrange"
)

// The flags of serve that set the Guardrails, named in every refusal so an
// operator knows which rule to change.
const (
	FlagAllowedPrefixes     = "service-cidr-allowed-prefixes"
	FlagForbiddenPrefixes   = "service-cidr-forbidden-prefixes"
	FlagMinPrefixLengthIPv4 = "service-cidr-min-prefix-length-ipv4"
	FlagMaxPrefixLengthIPv4 = "service-cidr-max-prefix-length-ipv4"
	FlagMinPrefixLengthIPv6 = "service-cidr-min-prefix-length-ipv6"
	FlagMaxPrefixLengthIPv6 = "service-cidr-max-prefix-length-ipv6"
	FlagOverlapWarnings     = "service-cidr-overlap-warnings"
)

// The default shortest prefix lengths of serve's guardrails. kube-apiserver's
// own flag check refuses a --service-cluster-ip-range of more than 2^20
// addresses (/12, /108) while a bitmap backs it, and none once the IPAddress
// model alone allocates (MultiCIDRServiceAllocator with
// DisableAllocatorDualWrite); its ServiceCIDRs are refused nothing wider.
// The defaults refuse what no cluster means to serve as ClusterIPs: an
// IPv4 CIDR wider than the widest private block (10.0.0.0/8), such as
// 0.0.0.0/0, which would shadow every other network for the Services'
// clients; an IPv6 CIDR wider than /64, which the IPAddress model would
// store and never serve. They keep kube-apiserver's answers to every CIDR
// it accepts up to those lengths (testdata/parity creates 10.0.0.0/8 and
// fd00:30::/64); 0 lifts them.
const (
	DefaultMinPrefixLengthIPv4 = 8
	DefaultMinPrefixLengthIPv6 = 64
)

// Guardrails are the server's rules on which CIDRs a ServiceCIDR may hold,
// beyond upstream's: a create, or an update that adds a CIDR, outside them
// is refused with 422 on spec.cidrs. The zero value allows every CIDR.
type Guardrails struct {
	// Allowed, when not empty, are the prefixes every CIDR must lie inside
	// (either family: a family none of them covers is refused whole).
	Allowed []netip.Prefix
	// Forbidden are the prefixes no CIDR may overlap: networks that must
	// never be served as ClusterIPs (the pods', the nodes').
	Forbidden []netip.Prefix
	// IPv4 and IPv6 bound the prefix length per family.
	IPv4, IPv6 PrefixLengths
}

// PrefixLengths bound a family's prefix length; zero is no bound.
type PrefixLengths struct {
	// Min is the shortest prefix allowed (the widest range).
	Min int
	// Max is the longest prefix allowed (the narrowest range).
	Max int
}

// IsZero reports whether g allows every CIDR.
func (g Guardrails) IsZero() bool {
	return len(g.Allowed) == 0 && len(g.Forbidden) == 0 && g.IPv4 == (PrefixLengths{}) && g.IPv6 == (PrefixLengths{})
}

// ParsePrefixes parses the values of a prefix-list flag strictly: each a
// canonical CIDR (no host bits, no leading zeros, lower-case IPv6), none
// given twice. flag names the flag in the errors.
func ParsePrefixes(flag string, values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, v := range values {
		p, err := subrange.ParsePrefix(v)
		switch {
		case v == "":
			errs = append(errs, fmt.Errorf("--%s: empty entry; give CIDRs separated by commas, such as 10.244.0.0/16,fd00:10:244::/56", flag))
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s %q: %w%s", flag, v, err, canonicalHint(v)))
		case slices.Contains(out, p):
			errs = append(errs, fmt.Errorf("--%s: %s is given twice", flag, p))
		default:
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// canonicalHint suggests the canonical form of a CIDR that parses leniently.
func canonicalHint(v string) string {
	p, err := netip.ParsePrefix(strings.TrimSpace(v))
	if err != nil || p.Masked().String() == v {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", p.Masked())
}

// Validate refuses guardrails that contradict themselves: a bound outside
// its family's lengths, a shortest prefix longer than the longest, an
// allowed prefix inside a forbidden one, or one that no allowed length can
// fit inside. Each error names the flags involved.
func (g Guardrails) Validate() error {
	var errs []error
	for _, f := range []struct {
		lengths  PrefixLengths
		bits     int
		min, max string
	}{
		{g.IPv4, 32, FlagMinPrefixLengthIPv4, FlagMaxPrefixLengthIPv4},
		{g.IPv6, 128, FlagMinPrefixLengthIPv6, FlagMaxPrefixLengthIPv6},
	} {
		if f.lengths.Min < 0 || f.lengths.Min > f.bits {
			errs = append(errs, fmt.Errorf("--%s=%d: must be from 0 (no bound) to %d", f.min, f.lengths.Min, f.bits))
		}
		if f.lengths.Max < 0 || f.lengths.Max > f.bits {
			errs = append(errs, fmt.Errorf("--%s=%d: must be from 0 (no bound) to %d", f.max, f.lengths.Max, f.bits))
		}
		if f.lengths.Min > 0 && f.lengths.Max > 0 && f.lengths.Min > f.lengths.Max {
			errs = append(errs, fmt.Errorf("--%s=%d is longer than --%s=%d: no prefix length is allowed", f.min, f.lengths.Min, f.max, f.lengths.Max))
		}
	}
	for _, a := range g.Allowed {
		for _, f := range g.Forbidden {
			if f.Bits() <= a.Bits() && f.Contains(a.Addr()) {
				errs = append(errs, fmt.Errorf("--%s %s lies inside --%s %s: nothing in it could be served", FlagAllowedPrefixes, a, FlagForbiddenPrefixes, f))
			}
		}
		if lengths, flag := g.lengthsOf(a); lengths.Max > 0 && lengths.Max < a.Bits() {
			errs = append(errs, fmt.Errorf("--%s %s is longer than --%s=%d: no ServiceCIDR could fit inside it", FlagAllowedPrefixes, a, flag, lengths.Max))
		}
	}
	return errors.Join(errs...)
}

// lengthsOf returns the bounds of p's family and the flag of its longest
// prefix.
func (g Guardrails) lengthsOf(p netip.Prefix) (PrefixLengths, string) {
	if p.Addr().Is4() {
		return g.IPv4, FlagMaxPrefixLengthIPv4
	}
	return g.IPv6, FlagMaxPrefixLengthIPv6
}

// Refusal is why the guardrails refuse one CIDR: the rule, with its flag.
func (g Guardrails) Refusal(p netip.Prefix) string {
	var reasons []string
	if len(g.Allowed) > 0 && !g.allows(p) {
		reasons = append(reasons, fmt.Sprintf("not inside a prefix allowed by --%s (%s)", FlagAllowedPrefixes, joinPrefixes(g.Allowed)))
	}
	for _, f := range g.Forbidden {
		if f.Overlaps(p) {
			reasons = append(reasons, fmt.Sprintf("overlaps %s, which --%s forbids (a network never to be served as ClusterIPs)", f, FlagForbiddenPrefixes))
		}
	}
	lengths, minFlag, maxFlag := g.IPv4, FlagMinPrefixLengthIPv4, FlagMaxPrefixLengthIPv4
	if p.Addr().Is6() {
		lengths, minFlag, maxFlag = g.IPv6, FlagMinPrefixLengthIPv6, FlagMaxPrefixLengthIPv6
	}
	if lengths.Min > 0 && p.Bits() < lengths.Min {
		reasons = append(reasons, fmt.Sprintf("prefix length /%d is shorter than the shortest allowed, /%d (--%s)", p.Bits(), lengths.Min, minFlag))
	}
	if lengths.Max > 0 && p.Bits() > lengths.Max {
		reasons = append(reasons, fmt.Sprintf("prefix length /%d is longer than the longest allowed, /%d (--%s)", p.Bits(), lengths.Max, maxFlag))
	}
	return strings.Join(reasons, "; ")
}

func (g Guardrails) allows(p netip.Prefix) bool {
	for _, a := range g.Allowed {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// check returns a 422 cause for each CIDR of cidrs that the guardrails
// refuse, skipping those in kept (an update's CIDRs stored before: a rule
// added later must not block the ServiceCIDR's updates, the removal of its
// finalizer among them). CIDRs that do not parse are left to ValidateCIDRs.
func (g Guardrails) check(cidrs, kept []string) field.ErrorList {
	var errs field.ErrorList
	for i, text := range cidrs {
		p, err := subrange.ParsePrefix(text)
		if err != nil || slices.Contains(kept, text) {
			continue
		}
		if reason := g.Refusal(p); reason != "" {
			errs = append(errs, field.Invalid(cidrsPath.Index(i), text, reason))
		}
	}
	return errs
}
