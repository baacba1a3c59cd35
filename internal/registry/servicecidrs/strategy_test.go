package servicecidrs

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateCIDRs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cidrs   []string
		wantErr string
	}{
		{cidrs: []string{"10.0.0.0/24"}},
		{cidrs: []string{"10.0.0.0/24", "fd00::/64"}},
		// upstream's texts, as testdata/parity records them
		{cidrs: nil, wantErr: "spec.cidrs: Required value: at least one CIDR required"},
		{cidrs: []string{"10.0.0.0/24", "fd00::/64", "10.1.0.0/24"}, wantErr: `spec.cidrs: Invalid value: {"CIDRs":["10.0.0.0/24","fd00::/64","10.1.0.0/24"]}: may only hold up to 2 values`},
		{cidrs: []string{"10.0.0.0/24", "10.1.0.0/24"}, wantErr: "no more than one IP for each IP family"},
		{cidrs: []string{"10.0.0.1/24"}, wantErr: `spec.cidrs[0]: Invalid value: "10.0.0.1/24": must not have bits set beyond the prefix length`},
		{cidrs: []string{"010.0.0.0/24"}, wantErr: "must not have leading 0s in IP or prefix length"},
		{cidrs: []string{"::ffff:10.0.0.0/120"}, wantErr: "IPv4-mapped"},
		{cidrs: []string{"FD00::/64"}, wantErr: `must be in canonical form ("fd00::/64")`},
		{cidrs: []string{"10.0.0.0"}, wantErr: "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"},
	}
	for _, tt := range tests {
		errs := ValidateCIDRs(tt.cidrs)
		if tt.wantErr == "" {
			if len(errs) != 0 {
				t.Errorf("%v: %v", tt.cidrs, errs)
			}
			continue
		}
		if !strings.Contains(errs.ToAggregate().Error(), tt.wantErr) {
			t.Errorf("%v: want %q, got %v", tt.cidrs, tt.wantErr, errs)
		}
	}
}

func TestUpdateOnlyGrows(t *testing.T) {
	t.Parallel()
	s := strategy{}
	sc := func(cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	ctx := context.Background()
	if errs := s.ValidateUpdate(ctx, sc("10.0.0.0/24", "fd00::/64"), sc("10.0.0.0/24")); len(errs) != 0 {
		t.Errorf("grow: %v", errs)
	}
	for _, bad := range [][]string{{"10.1.0.0/24"}, {"fd00::/64", "10.0.0.0/24"}} {
		if errs := s.ValidateUpdate(ctx, sc(bad...), sc("10.0.0.0/24")); len(errs) == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
	if errs := s.ValidateUpdate(ctx, sc("10.0.0.0/24"), sc("10.0.0.0/24", "fd00::/64")); len(errs) == 0 {
		t.Errorf("shrink accepted")
	}
}

// TestScopeAnnotationsOnUpdate: a misspelled scope prefix is refused when it
// is written, and an update that keeps an annotation as it was stored (by a
// writer that did not refuse it) is not refused for it.
func TestScopeAnnotationsOnUpdate(t *testing.T) {
	t.Parallel()
	s := strategy{}
	ctx := context.Background()
	sc := func(annotations map[string]string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "1", Annotations: annotations},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}},
		}
	}
	typo := map[string]string{"scope.allocater.github.io/namespace-selector": "team=a"}
	if errs := s.Validate(ctx, sc(typo)); len(errs) != 1 || !strings.Contains(errs[0].Error(), "did you mean scope.allocator.github.io/namespace-selector?") {
		t.Errorf("create with a misspelled prefix: %v", errs)
	}
	if errs := s.ValidateUpdate(ctx, sc(nil), sc(nil)); len(errs) != 0 {
		t.Errorf("plain update: %v", errs)
	}
	if errs := s.ValidateUpdate(ctx, sc(typo), sc(nil)); len(errs) != 1 {
		t.Errorf("update adding a misspelled prefix: %v, want it refused", errs)
	}
	kept := map[string]string{"scope.allocater.github.io/namespace-selector": "team=a", "example.com/x": "y"}
	if errs := s.ValidateUpdate(ctx, sc(kept), sc(typo)); len(errs) != 0 {
		t.Errorf("update keeping the stored annotation: %v, want it allowed", errs)
	}
	changed := map[string]string{"scope.allocater.github.io/namespace-selector": "team=b"}
	if errs := s.ValidateUpdate(ctx, sc(changed), sc(typo)); len(errs) != 1 {
		t.Errorf("update changing it: %v, want it refused", errs)
	}
}
