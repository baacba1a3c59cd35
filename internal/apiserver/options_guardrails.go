package apiserver

import (
	"errors"
	"fmt"
	"net/netip"

	cliflag "k8s.io/component-base/cli/flag"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// GuardrailOptions are serve's flags on which CIDRs a ServiceCIDR may hold
// (servicecidrs.Guardrails). By default (NewGuardrailOptions) they refuse
// only CIDRs wider than /8 (IPv4) and /64 (IPv6); zero lengths and no
// prefixes accept every CIDR upstream accepts.
type GuardrailOptions struct {
	AllowedPrefixes   []string
	ForbiddenPrefixes []string
	IPv4, IPv6        servicecidrs.PrefixLengths
	// OverlapWarnings: servicecidrs.Policy.WarnOverlaps, and the Service
	// storage's warning of a ClusterIP in a ServiceCIDR being deleted.
	OverlapWarnings bool
}

// NewGuardrailOptions returns the defaults: the shortest prefix lengths of
// servicecidrs.DefaultMinPrefixLengthIPv4 and IPv6, and overlap warnings.
func NewGuardrailOptions() GuardrailOptions {
	return GuardrailOptions{
		IPv4:            servicecidrs.PrefixLengths{Min: servicecidrs.DefaultMinPrefixLengthIPv4},
		IPv6:            servicecidrs.PrefixLengths{Min: servicecidrs.DefaultMinPrefixLengthIPv6},
		OverlapWarnings: true,
	}
}

// addFlags registers the guardrail flags in their own section, after the
// allocation flags.
func (o *GuardrailOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("ServiceCIDR guardrail")
	fs.StringSliceVar(&o.AllowedPrefixes, servicecidrs.FlagAllowedPrefixes, o.AllowedPrefixes,
		"CIDRs, comma separated, that every CIDR of a ServiceCIDR must lie inside (both families: list an IPv6 prefix too on a dual-stack cluster). Empty: any.")
	fs.StringSliceVar(&o.ForbiddenPrefixes, servicecidrs.FlagForbiddenPrefixes, o.ForbiddenPrefixes,
		"CIDRs, comma separated, that no CIDR of a ServiceCIDR may overlap: networks never to be served as ClusterIPs, such as the pod and node networks.")
	fs.IntVar(&o.IPv4.Min, servicecidrs.FlagMinPrefixLengthIPv4, o.IPv4.Min,
		"The shortest prefix length (widest range) an IPv4 CIDR of a ServiceCIDR may have: the default refuses CIDRs wider than 10.0.0.0/8, such as 0.0.0.0/0. 0: no bound.")
	fs.IntVar(&o.IPv4.Max, servicecidrs.FlagMaxPrefixLengthIPv4, o.IPv4.Max,
		"The longest prefix length (narrowest range) an IPv4 CIDR of a ServiceCIDR may have. 0: no bound.")
	fs.IntVar(&o.IPv6.Min, servicecidrs.FlagMinPrefixLengthIPv6, o.IPv6.Min,
		"The shortest prefix length (widest range) an IPv6 CIDR of a ServiceCIDR may have: the ipaddress model serves /64 or longer, and the default refuses wider ones rather than store them unserved. 0: no bound.")
	fs.IntVar(&o.IPv6.Max, servicecidrs.FlagMaxPrefixLengthIPv6, o.IPv6.Max,
		"The longest prefix length (narrowest range) an IPv6 CIDR of a ServiceCIDR may have. 0: no bound.")
	fs.BoolVar(&o.OverlapWarnings, servicecidrs.FlagOverlapWarnings, o.OverlapWarnings,
		"Warn the client that creates a ServiceCIDR, or adds a CIDR to one, of each ServiceCIDR it overlaps (overlaps stay allowed, as in Kubernetes), and the client that sets a lifecycle annotation of each overlap whose addresses a draining or manual-only ServiceCIDR closes; warn the client that asks for a ClusterIP only ServiceCIDRs being deleted hold. false: kube-apiserver's answers exactly, which carry no such warning.")
}

// Guardrails parses the flags strictly and refuses guardrails that
// contradict themselves.
func (o *GuardrailOptions) Guardrails() (servicecidrs.Guardrails, error) {
	allowed, allowedErr := servicecidrs.ParsePrefixes(servicecidrs.FlagAllowedPrefixes, o.AllowedPrefixes)
	forbidden, forbiddenErr := servicecidrs.ParsePrefixes(servicecidrs.FlagForbiddenPrefixes, o.ForbiddenPrefixes)
	if err := errors.Join(allowedErr, forbiddenErr); err != nil {
		return servicecidrs.Guardrails{}, err
	}
	g := servicecidrs.Guardrails{Allowed: allowed, Forbidden: forbidden, IPv4: o.IPv4, IPv6: o.IPv6}
	if err := g.Validate(); err != nil {
		return servicecidrs.Guardrails{}, err
	}
	return g, nil
}

// checkDefaultRange refuses guardrails that refuse the server's own default
// ServiceCIDR, made from --service-cluster-ip-range: the server would fail
// to create it and never become ready.
func checkDefaultRange(g servicecidrs.Guardrails, cidrs []netip.Prefix) []error {
	var errs []error
	for _, p := range cidrs {
		if reason := g.Refusal(p); reason != "" {
			errs = append(errs, fmt.Errorf("--service-cluster-ip-range %s breaks the ServiceCIDR guardrails (%s): the default ServiceCIDR %q would be refused; change the range or the guardrail flags",
				p, reason, servicecidr.DefaultName))
		}
	}
	return errs
}
