package scope

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// terms is a selector of n requirements ("k0=v,k1=v,...").
func terms(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("k%d=v", i)
	}
	return strings.Join(parts, ",")
}

// namespaceList is a selector listing n namespaces by name in one term.
func namespaceList(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("team-%03d", i)
	}
	return "kubernetes.io/metadata.name in (" + strings.Join(names, ",") + ")"
}

func TestValidateBounds(t *testing.T) {
	t.Parallel()
	ns, svc := NamespaceSelectorAnnotation, ServiceSelectorAnnotation
	cases := []struct {
		name    string
		in      map[string]string
		wantErr string // substring; "" means accepted
	}{
		{name: "no scope"},
		{name: "every namespace", in: map[string]string{ns: ""}},
		{name: "32 terms", in: map[string]string{ns: terms(MaxSelectorRequirements)}},
		{name: "some hundred namespaces by name", in: map[string]string{ns: namespaceList(300)}},
		{name: "33 terms", in: map[string]string{ns: terms(MaxSelectorRequirements + 1)},
			wantErr: `metadata.annotations[scope.allocator.github.io/namespace-selector]: Too many: 33: a scope selector may have at most 32 requirements (comma-separated terms)`},
		{name: "33 terms on Services", in: map[string]string{ns: "", svc: terms(33)},
			wantErr: `metadata.annotations[scope.allocator.github.io/service-selector]: Too many: 33`},
		{name: "129 kB", in: map[string]string{ns: namespaceList(12730)},
			wantErr: `metadata.annotations[scope.allocator.github.io/namespace-selector]: Too long: a scope selector may be at most 4096 bytes, this one is 129062`},
		{name: "a bad selector is Validate's", in: map[string]string{ns: "a in ("}},
	}
	for _, tc := range cases {
		errs := ValidateBounds(tc.in, field.NewPath("metadata", "annotations"))
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.name, errs)
		case tc.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr)):
			t.Errorf("%s: %v, want one error containing %q", tc.name, errs, tc.wantErr)
		}
		if len(errs) > 0 && len(errs.ToAggregate().Error()) > 400 {
			t.Errorf("%s: the error repeats the selector: %d bytes", tc.name, len(errs.ToAggregate().Error()))
		}
	}
}
