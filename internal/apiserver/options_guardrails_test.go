package apiserver

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
)

// TestGuardrailFlags parses serve's guardrail flags as a command line would
// give them and checks the options: malformed values, contradictions, and
// a --service-cluster-ip-range the guardrails would refuse stop the server
// at start with one error naming the flags.
func TestGuardrailFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		args    []string
		wantErr string // "" valid
		check   func(t *testing.T, g servicecidrs.Guardrails)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, g servicecidrs.Guardrails) {
			want := servicecidrs.Guardrails{IPv4: servicecidrs.PrefixLengths{Min: 8}, IPv6: servicecidrs.PrefixLengths{Min: 64}}
			if len(g.Allowed) != 0 || len(g.Forbidden) != 0 || g.IPv4 != want.IPv4 || g.IPv6 != want.IPv6 {
				t.Errorf("no flags: %+v, want %+v", g, want)
			}
			for _, p := range []string{"0.0.0.0/0", "10.0.0.0/7", "fd00::/48"} {
				if g.Refusal(netip.MustParsePrefix(p)) == "" {
					t.Errorf("the defaults accept %s", p)
				}
			}
			for _, p := range []string{"10.0.0.0/8", "10.96.0.0/12", "fd00::/64", "fd00:10:96::/108"} {
				if reason := g.Refusal(netip.MustParsePrefix(p)); reason != "" {
					t.Errorf("the defaults refuse %s: %s", p, reason)
				}
			}
		}},
		{name: "none", args: []string{"--service-cidr-min-prefix-length-ipv4=0", "--service-cidr-min-prefix-length-ipv6=0"},
			check: func(t *testing.T, g servicecidrs.Guardrails) {
				if !g.IsZero() {
					t.Errorf("no bounds: %+v", g)
				}
			}},
		{name: "kubeadm's default range", args: []string{"--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/108"},
			check: func(t *testing.T, g servicecidrs.Guardrails) {}},
		{name: "a range wider than the default bound", args: []string{"--service-cluster-ip-range=10.0.0.0/7"},
			wantErr: `--service-cluster-ip-range 10.0.0.0/7 breaks the ServiceCIDR guardrails (prefix length /7 is shorter than the shortest allowed, /8 (--service-cidr-min-prefix-length-ipv4))`},
		{name: "a range wider than the default bound, allowed", args: []string{"--service-cluster-ip-range=10.0.0.0/7", "--service-cidr-min-prefix-length-ipv4=7"},
			check: func(t *testing.T, g servicecidrs.Guardrails) {}},
		{name: "all", args: []string{
			"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
			"--service-cidr-allowed-prefixes=10.96.0.0/12,fd00:10::/32",
			"--service-cidr-forbidden-prefixes=10.244.0.0/16", "--service-cidr-forbidden-prefixes=fd00:10:244::/56",
			"--service-cidr-min-prefix-length-ipv4=12", "--service-cidr-max-prefix-length-ipv4=28",
			"--service-cidr-min-prefix-length-ipv6=64", "--service-cidr-max-prefix-length-ipv6=120",
		}, check: func(t *testing.T, g servicecidrs.Guardrails) {
			if len(g.Allowed) != 2 || len(g.Forbidden) != 2 || g.IPv4.Min != 12 || g.IPv6.Max != 120 {
				t.Errorf("parsed %+v", g)
			}
		}},
		{name: "host bits", args: []string{"--service-cidr-forbidden-prefixes=10.244.0.1/16"},
			wantErr: `--service-cidr-forbidden-prefixes "10.244.0.1/16"`},
		{name: "empty entry", args: []string{"--service-cidr-allowed-prefixes=10.0.0.0/8,,fd00::/8"},
			wantErr: "--service-cidr-allowed-prefixes: empty entry"},
		{name: "min over max", args: []string{"--service-cidr-min-prefix-length-ipv4=24", "--service-cidr-max-prefix-length-ipv4=16"},
			wantErr: "no prefix length is allowed"},
		{name: "default range not allowed", args: []string{"--service-cidr-allowed-prefixes=10.100.0.0/16"},
			wantErr: `--service-cluster-ip-range 10.96.0.0/16 breaks the ServiceCIDR guardrails (not inside a prefix allowed by --service-cidr-allowed-prefixes (10.100.0.0/16)): the default ServiceCIDR "kubernetes" would be refused`},
		{name: "default range forbidden", args: []string{"--service-cidr-forbidden-prefixes=10.96.128.0/17"},
			wantErr: "overlaps 10.96.128.0/17, which --service-cidr-forbidden-prefixes forbids"},
		{name: "default range too wide", args: []string{"--service-cidr-min-prefix-length-ipv4=20"},
			wantErr: "prefix length /16 is shorter than the shortest allowed, /20 (--service-cidr-min-prefix-length-ipv4)"},
		{name: "dual-stack default without an allowed IPv6 prefix", args: []string{
			"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112", "--service-cidr-allowed-prefixes=10.96.0.0/12"},
			wantErr: "--service-cluster-ip-range fd00:10:96::/112 breaks the ServiceCIDR guardrails"},
		{name: "not a number", args: []string{"--service-cidr-max-prefix-length-ipv6=/120"}, wantErr: "invalid argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := NewOptions()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.AddFlags(fs)
			err := fs.Parse(tc.args)
			if err == nil {
				err = o.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g, err := o.Guardrails.Guardrails()
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, g)
		})
	}
}
