package servicecidrs

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, v := range s {
		out[i] = netip.MustParsePrefix(v)
	}
	return out
}

func TestParsePrefixes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      []string
		want    []netip.Prefix
		wantErr string
	}{
		{in: nil},
		{in: []string{"10.0.0.0/8", "fd00::/48"}, want: prefixes("10.0.0.0/8", "fd00::/48")},
		{in: []string{"10.244.0.0/16", "10.244.0.0/24"}, want: prefixes("10.244.0.0/16", "10.244.0.0/24")}, // nested is fine
		{in: []string{""}, wantErr: "--f: empty entry"},
		{in: []string{"10.0.0.1/8"}, wantErr: `--f "10.0.0.1/8": `},
		{in: []string{"10.0.0.1/8"}, wantErr: "(did you mean 10.0.0.0/8?)"},
		{in: []string{"FD00::/48"}, wantErr: "(did you mean fd00::/48?)"},
		{in: []string{"010.0.0.0/8"}, wantErr: `--f "010.0.0.0/8"`},
		{in: []string{" 10.0.0.0/8"}, wantErr: `--f " 10.0.0.0/8"`},
		{in: []string{"10.0.0.0"}, wantErr: `--f "10.0.0.0"`},
		{in: []string{"::ffff:10.0.0.0/104"}, wantErr: `--f "::ffff:10.0.0.0/104"`},
		{in: []string{"fe80::%eth0/64"}, wantErr: `--f "fe80::%eth0/64"`},
		{in: []string{"10.0.0.0/33"}, wantErr: `--f "10.0.0.0/33"`},
		{in: []string{"10.0.0.0/8", "10.0.0.0/8"}, wantErr: "--f: 10.0.0.0/8 is given twice"},
	}
	for _, tc := range cases {
		got, err := ParsePrefixes("f", tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
		} else if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("%q: (-want +got)\n%s", tc.in, diff)
		}
	}
}

// FuzzParsePrefixes: whatever parses is canonical (its text is the input
// entry) and listed once, and an error never comes with prefixes.
func FuzzParsePrefixes(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.1/8", "fd00::/48", "FD00::/48", "", "10.0.0.0/8,10.0.0.0/8", "::ffff:1.2.3.0/120"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		values := strings.Split(in, ",")
		got, err := ParsePrefixes("f", values)
		if err != nil {
			if got != nil && len(got) == len(values) {
				t.Fatalf("%q: error %v with every value parsed", in, err)
			}
			return
		}
		if len(got) != len(values) {
			t.Fatalf("%q: %d prefixes from %d values without error", in, len(got), len(values))
		}
		for i, p := range got {
			if p.String() != values[i] || p.Masked() != p {
				t.Fatalf("%q: parsed %s from %q: not canonical", in, p, values[i])
			}
			if slices.Index(got, p) != i {
				t.Fatalf("%q: %s listed twice", in, p)
			}
		}
	})
}

func TestGuardrailsValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		g       Guardrails
		wantErr string
	}{
		{name: "zero"},
		{name: "full", g: Guardrails{Allowed: prefixes("10.96.0.0/12", "fd00::/48"), Forbidden: prefixes("10.244.0.0/16"),
			IPv4: PrefixLengths{Min: 16, Max: 28}, IPv6: PrefixLengths{Min: 64, Max: 120}}},
		{name: "negative", g: Guardrails{IPv4: PrefixLengths{Min: -1}}, wantErr: "--service-cidr-min-prefix-length-ipv4=-1: must be from 0 (no bound) to 32"},
		{name: "ipv4 beyond 32", g: Guardrails{IPv4: PrefixLengths{Max: 33}}, wantErr: "--service-cidr-max-prefix-length-ipv4=33: must be from 0 (no bound) to 32"},
		{name: "ipv6 beyond 128", g: Guardrails{IPv6: PrefixLengths{Min: 129}}, wantErr: "--service-cidr-min-prefix-length-ipv6=129"},
		{name: "min over max", g: Guardrails{IPv6: PrefixLengths{Min: 120, Max: 112}},
			wantErr: "--service-cidr-min-prefix-length-ipv6=120 is longer than --service-cidr-max-prefix-length-ipv6=112: no prefix length is allowed"},
		{name: "allowed inside forbidden", g: Guardrails{Allowed: prefixes("10.244.1.0/24"), Forbidden: prefixes("10.244.0.0/16")},
			wantErr: "--service-cidr-allowed-prefixes 10.244.1.0/24 lies inside --service-cidr-forbidden-prefixes 10.244.0.0/16"},
		{name: "allowed narrower than the longest", g: Guardrails{Allowed: prefixes("10.96.0.0/24"), IPv4: PrefixLengths{Max: 20}},
			wantErr: "--service-cidr-allowed-prefixes 10.96.0.0/24 is longer than --service-cidr-max-prefix-length-ipv4=20"},
		{name: "forbidden inside allowed is fine", g: Guardrails{Allowed: prefixes("10.0.0.0/8"), Forbidden: prefixes("10.244.0.0/16")}},
	}
	for _, tc := range cases {
		err := tc.g.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestGuardrailsRefuse: the 422 causes of a create, each naming its rule and
// flag, and an update refused only for the CIDR it adds.
func TestGuardrailsRefuse(t *testing.T) {
	t.Parallel()
	s := strategy{extra: &extras{policy: Policy{Guardrails: Guardrails{
		Allowed:   prefixes("10.96.0.0/12", "fd00::/48"),
		Forbidden: prefixes("10.100.0.0/16", "fd00:0:0:10::/64"),
		IPv4:      PrefixLengths{Min: 16, Max: 28},
		IPv6:      PrefixLengths{Min: 64, Max: 120},
	}}}}
	cases := []struct {
		cidrs   []string
		wantErr string // "" accepted
	}{
		{cidrs: []string{"10.96.0.0/24"}},
		{cidrs: []string{"10.96.0.0/24", "fd00::/112"}},
		{cidrs: []string{"10.200.0.0/24"}, wantErr: `spec.cidrs[0]: Invalid value: "10.200.0.0/24": not inside a prefix allowed by --service-cidr-allowed-prefixes (10.96.0.0/12, fd00::/48)`},
		{cidrs: []string{"10.100.5.0/24"}, wantErr: "overlaps 10.100.0.0/16, which --service-cidr-forbidden-prefixes forbids"},
		{cidrs: []string{"10.100.0.0/16"}, wantErr: "overlaps 10.100.0.0/16"},
		{cidrs: []string{"10.96.0.0/12"}, wantErr: "prefix length /12 is shorter than the shortest allowed, /16 (--service-cidr-min-prefix-length-ipv4)"},
		{cidrs: []string{"10.96.0.0/30"}, wantErr: "prefix length /30 is longer than the longest allowed, /28 (--service-cidr-max-prefix-length-ipv4)"},
		{cidrs: []string{"10.96.0.0/24", "fd00:1::/112"}, wantErr: `spec.cidrs[1]: Invalid value: "fd00:1::/112": not inside a prefix allowed`},
		{cidrs: []string{"10.96.0.0/24", "fd00:0:0:10::/112"}, wantErr: "overlaps fd00:0:0:10::/64"},
		{cidrs: []string{"10.96.0.0/24", "fd00::/124"}, wantErr: "/124 is longer than the longest allowed, /120 (--service-cidr-max-prefix-length-ipv6)"},
		{cidrs: []string{"10.96.0.0/24", "fd00::/56"}, wantErr: "/56 is shorter than the shortest allowed, /64 (--service-cidr-min-prefix-length-ipv6)"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		errs := s.Validate(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: tc.cidrs}})
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("%v: %v", tc.cidrs, errs)
		case tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr):
			t.Errorf("%v: %v, want an error containing %q", tc.cidrs, errs, tc.wantErr)
		}
	}

	// A CIDR stored before the rule keeps passing; one the update adds is checked.
	old := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/24"}}}
	kept := old.DeepCopy()
	kept.Annotations = map[string]string{lifecycle.DrainingAnnotation: "true"}
	if errs := s.ValidateUpdate(ctx, kept, old); len(errs) > 0 {
		t.Errorf("an update keeping a CIDR stored before the rule: %v", errs)
	}
	grown := old.DeepCopy()
	grown.Spec.CIDRs = append(grown.Spec.CIDRs, "fd00:1::/112")
	if errs := s.ValidateUpdate(ctx, grown, old); len(errs) != 1 || !strings.Contains(errs[0].Error(), `spec.cidrs[1]: Invalid value: "fd00:1::/112"`) {
		t.Errorf("an update adding a refused CIDR: %v, want the one cause on spec.cidrs[1]", errs)
	}
}

// TestLifecycleAnnotationsValidated: the strategy refuses bad lifecycle
// annotations on create and on an update that writes them, not on one that
// keeps them as stored.
func TestLifecycleAnnotationsValidated(t *testing.T) {
	t.Parallel()
	s := strategy{}
	ctx := context.Background()
	sc := func(kv ...string) *networkingv1.ServiceCIDR {
		obj := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1", Annotations: map[string]string{}},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
		for i := 0; i+1 < len(kv); i += 2 {
			obj.Annotations[kv[i]] = kv[i+1]
		}
		return obj
	}
	for _, tc := range []struct {
		obj     *networkingv1.ServiceCIDR
		wantErr string
	}{
		{obj: sc(lifecycle.DrainingAnnotation, "true", lifecycle.ManualOnlyAnnotation, "true")},
		{obj: sc(lifecycle.DrainingAnnotation, "yes"), wantErr: `metadata.annotations[lifecycle.allocator.github.io/draining]: Invalid value: "yes": must be "true" or "false"`},
		{obj: sc("lifecycle.allocator.github.io/drain", "true"), wantErr: "Unsupported value"},
		{obj: sc("lifecycel.allocator.github.io/draining", "true"), wantErr: "did you mean lifecycle.allocator.github.io/draining?"},
	} {
		errs := s.Validate(ctx, tc.obj)
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("%v: %v", tc.obj.Annotations, errs)
		case tc.wantErr != "" && !strings.Contains(errs.ToAggregate().Error(), tc.wantErr):
			t.Errorf("%v: %v, want an error containing %q", tc.obj.Annotations, errs, tc.wantErr)
		}
	}
	stored := sc(lifecycle.DrainingAnnotation, "yes") // written by a server that does not validate
	if errs := s.ValidateUpdate(ctx, stored.DeepCopy(), stored); len(errs) > 0 {
		t.Errorf("an update keeping a stored bad value: %v", errs)
	}
	if errs := s.ValidateUpdate(ctx, sc(lifecycle.DrainingAnnotation, "1"), stored); len(errs) == 0 {
		t.Error("an update writing a bad value was accepted")
	}
}

func TestOverlapWarnings(t *testing.T) {
	t.Parallel()
	others := []*networkingv1.ServiceCIDR{
		{ObjectMeta: metav1.ObjectMeta{Name: "wide"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/16", "fd00::/64"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "narrow"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.5.0/28"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "apart"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.5.0/24"}}}, // itself
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.5.0/24", "fd00::/112"}}}
	got := overlapWarnings(sc, nil, others, false)
	want := []string{
		`ServiceCIDR "new": 10.0.5.0/24 lies inside ServiceCIDR "wide" (10.0.0.0/16); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`,
		`ServiceCIDR "new": 10.0.5.0/24 contains ServiceCIDR "narrow" (10.0.5.0/28); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`,
		`ServiceCIDR "new": fd00::/112 lies inside ServiceCIDR "wide" (fd00::/64); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := overlapWarnings(sc, []string{"10.0.5.0/24"}, others, false); len(got) != 1 || !strings.Contains(got[0], "fd00::/112") {
		t.Errorf("an update keeping 10.0.5.0/24 warns %v, want only the added fd00::/112", got)
	}
	var many []*networkingv1.ServiceCIDR
	for i := range 8 {
		many = append(many, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: string(rune('a' + i))}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.5.0/24"}}})
	}
	got = overlapWarnings(sc, nil, many, false)
	if len(got) != maxOverlapWarnings+1 || got[len(got)-1] != `ServiceCIDR "new" overlaps 3 more ServiceCIDR CIDRs` {
		t.Errorf("8 overlaps: %q", got)
	}
}

func TestLifecycleIgnoredWarning(t *testing.T) {
	t.Parallel()
	bitmap := strategy{extra: &extras{policy: Policy{LifecycleIgnored: true}}}
	ctx := context.Background()
	plain := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
	draining := plain.DeepCopy()
	draining.Annotations = map[string]string{lifecycle.DrainingAnnotation: "true"}
	if w := bitmap.WarningsOnCreate(ctx, plain); len(w) != 0 {
		t.Errorf("plain create warns %q", w)
	}
	if w := bitmap.WarningsOnCreate(ctx, draining); len(w) != 1 || !strings.Contains(w[0], "ignores the lifecycle.allocator.github.io/ annotations") {
		t.Errorf("draining create warns %q", w)
	}
	if w := bitmap.WarningsOnUpdate(ctx, draining, plain); len(w) != 1 {
		t.Errorf("annotating warns %q, want the one warning", w)
	}
	if w := bitmap.WarningsOnUpdate(ctx, draining, draining.DeepCopy()); len(w) != 0 {
		t.Errorf("an update keeping the annotation warns %q", w)
	}
	if w := (strategy{extra: &extras{}}).WarningsOnCreate(ctx, draining); len(w) != 0 {
		t.Errorf("the ipaddress model warns %q", w)
	}
}

// TestOverlapWarningsOptIn: the strategy lists ServiceCIDRs for overlap
// warnings only when the policy asks for them (kube-apiserver sends none).
func TestOverlapWarningsOptIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	listed := 0
	list := func(context.Context) ([]*networkingv1.ServiceCIDR, error) {
		listed++
		return []*networkingv1.ServiceCIDR{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/16"}}}}, nil
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.1.0/24"}}}
	if w := (strategy{extra: &extras{list: list}}).WarningsOnCreate(ctx, sc); len(w) != 0 || listed != 0 {
		t.Errorf("without WarnOverlaps: warnings %q, %d lists", w, listed)
	}
	if w := (strategy{extra: &extras{list: list, policy: Policy{WarnOverlaps: true}}}).WarningsOnCreate(ctx, sc); len(w) != 1 || listed != 1 {
		t.Errorf("with WarnOverlaps: warnings %q, %d lists", w, listed)
	}
}
