package servicecidrs

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// TestScopeSelectorBounds: a create or update that writes a selector beyond
// the bounds gets 422; an update keeping one as stored (by kube-apiserver,
// or before the bound) is not refused for it.
func TestScopeSelectorBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := strategy{}
	sc := func(selector string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: "team", ResourceVersion: "1", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: selector}},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}},
		}
	}
	huge := "team in (" + strings.Repeat("a,", 3000) + "b)"
	if errs := s.Validate(ctx, sc("team=a")); len(errs) != 0 {
		t.Errorf("a small selector: %v", errs)
	}
	errs := s.Validate(ctx, sc(huge))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "a scope selector may be at most 4096 bytes") {
		t.Errorf("a 6 kB selector: %v", errs)
	}
	if errs := s.ValidateUpdate(ctx, sc(huge), sc("team=a")); len(errs) != 1 {
		t.Errorf("an update writing a 6 kB selector: %v, want one error", errs)
	}
	if errs := s.ValidateUpdate(ctx, sc(huge), sc(huge)); len(errs) != 0 {
		t.Errorf("an update keeping a stored 6 kB selector: %v", errs)
	}
}
