package scope

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/allocation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ns := NamespaceSelectorAnnotation
	cases := []struct {
		name    string
		in      map[string]string
		scoped  bool
		wantErr string // substring; "" means valid
		check   func(t *testing.T, s *Scope)
	}{
		{name: "no annotations"},
		{name: "other annotations only", in: map[string]string{"example.com/x": "y"}},
		{name: "all namespaces", in: map[string]string{ns: ""}, scoped: true, check: func(t *testing.T, s *Scope) {
			if !s.Matches(labels.Set{"a": "b"}, nil) || s.Priority != 0 || s.Fallback {
				t.Errorf("empty selector: %+v", s)
			}
		}},
		{name: "full", in: map[string]string{ns: "team in (a,b)", ServiceSelectorAnnotation: "tier=web", PriorityAnnotation: "10", FallbackAnnotation: "true"},
			scoped: true, check: func(t *testing.T, s *Scope) {
				if s.Priority != 10 || !s.Fallback {
					t.Errorf("priority/fallback: %+v", s)
				}
				if !s.Matches(labels.Set{"team": "a"}, labels.Set{"tier": "web"}) {
					t.Error("team=a tier=web should match")
				}
				if s.Matches(labels.Set{"team": "c"}, labels.Set{"tier": "web"}) || s.Matches(labels.Set{"team": "a"}, labels.Set{"tier": "db"}) {
					t.Error("other team or tier should not match")
				}
				if got := s.String(); got != "namespaces team in (a,b); services tier=web; priority 10; fallback" {
					t.Errorf("String() = %q", got)
				}
			}},
		{name: "negative priority", in: map[string]string{ns: "a=b", PriorityAnnotation: "-1000"}, scoped: true},
		{name: "bad namespace selector", in: map[string]string{ns: "team in (a"}, wantErr: "must be a label selector"},
		{name: "bad service selector", in: map[string]string{ns: "", ServiceSelectorAnnotation: "==x"}, wantErr: ServiceSelectorAnnotation},
		{name: "priority not a number", in: map[string]string{ns: "", PriorityAnnotation: "high"}, wantErr: "must be an integer from -1000 to 1000"},
		{name: "priority too big", in: map[string]string{ns: "", PriorityAnnotation: "1001"}, wantErr: "must be an integer"},
		{name: "fallback yes", in: map[string]string{ns: "", FallbackAnnotation: "yes"}, wantErr: `must be "true" or "false"`},
		{name: "unknown key", in: map[string]string{ns: "", Prefix + "namespaces": "a"}, wantErr: "Unsupported value"},
		{name: "priority without namespaces", in: map[string]string{PriorityAnnotation: "1"}, wantErr: "must say which namespaces it serves"},
		{name: "misspelled prefix", in: map[string]string{"scope.allocater.github.io/namespace-selector": "team=a"},
			wantErr: `annotation prefix "scope.allocater.github.io/" is not the scope prefix "scope.allocator.github.io/": did you mean scope.allocator.github.io/namespace-selector?`},
		{name: "misspelled prefix beside a scope", in: map[string]string{ns: "", "scopes.allocator.github.io/priority": "5"}, wantErr: "did you mean scope.allocator.github.io/priority?"},
		{name: "other domain of the project", in: map[string]string{"scope.allocator.github.com/fallback": "true"}, wantErr: "did you mean scope.allocator.github.io/fallback?"},
		{name: "far from the prefix", in: map[string]string{"allocator.github.io/service-uid": "x", "example.com/scope": "y", "no-slash": "z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tc.wantErr)
				}
				if errs := Validate(tc.in, field.NewPath("metadata", "annotations")); len(errs) == 0 {
					t.Fatal("Validate accepted what Parse refused")
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if (s != nil) != tc.scoped || Scoped(tc.in) != tc.scoped {
				t.Fatalf("scoped = %v (Scoped %v), want %v", s != nil, Scoped(tc.in), tc.scoped)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// FuzzParse: Parse never panics, and accepts exactly what Validate accepts.
func FuzzParse(f *testing.F) {
	f.Add("team in (a,b)", "tier=web", "10", "true", true)
	f.Add("", "", "", "", false)
	f.Add("a=", "!b", "-0", "false", true)
	f.Fuzz(func(t *testing.T, ns, svc, prio, fallback string, withNS bool) {
		in := map[string]string{}
		if withNS {
			in[NamespaceSelectorAnnotation] = ns
		}
		for k, v := range map[string]string{ServiceSelectorAnnotation: svc, PriorityAnnotation: prio, FallbackAnnotation: fallback} {
			if v != "" {
				in[k] = v
			}
		}
		s, err := Parse(in)
		errs := Validate(in, field.NewPath("metadata", "annotations"))
		if (err == nil) != (len(errs) == 0) {
			t.Fatalf("Parse err %v, Validate %v", err, errs)
		}
		if err == nil && (s != nil) != withNS {
			t.Fatalf("scoped %v with namespace-selector present %v", s != nil, withNS)
		}
		if s != nil && (s.Priority < -MaxPriority || s.Priority > MaxPriority) {
			t.Fatalf("priority %d out of bounds", s.Priority)
		}
	})
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	fb, strict := &Scope{Fallback: true}, &Scope{}
	type note struct {
		s  *Scope
		in bool
	}
	cases := []struct {
		name     string
		notes    []note
		in       bool
		unscoped bool
	}{
		{name: "no scoped ServiceCIDRs", unscoped: true},
		{name: "in none", notes: []note{{strict, false}, {fb, false}}, unscoped: true},
		{name: "in a strict one", notes: []note{{strict, true}}, in: true},
		{name: "in one that falls back", notes: []note{{fb, true}}, in: true, unscoped: true},
		{name: "falls back, then strict", notes: []note{{fb, true}, {strict, true}}, in: true},
		{name: "strict, then falls back", notes: []note{{strict, true}, {fb, true}}, in: true},
		{name: "falls back, strict one not matched", notes: []note{{fb, true}, {strict, false}}, in: true, unscoped: true},
	}
	for _, tc := range cases {
		var v Verdict
		for _, n := range tc.notes {
			v.Note(n.s, n.in)
		}
		if v.In != tc.in || v.Unscoped() != tc.unscoped {
			t.Errorf("%s: In %v Unscoped %v, want %v %v", tc.name, v.In, v.Unscoped(), tc.in, tc.unscoped)
		}
	}
}

func TestSameScope(t *testing.T) {
	t.Parallel()
	a := map[string]string{NamespaceSelectorAnnotation: "team=a", "example.com/x": "1"}
	if !SameScope(a, map[string]string{NamespaceSelectorAnnotation: "team=a", "example.com/x": "2"}) {
		t.Error("other annotations changed: same scope")
	}
	for _, b := range []map[string]string{
		{NamespaceSelectorAnnotation: "team=b"},
		{NamespaceSelectorAnnotation: "team=a", FallbackAnnotation: "false"}, // added, even if it means the default
		nil,
	} {
		if SameScope(a, b) {
			t.Errorf("%v and %v: not the same scope", a, b)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"abc", "abc", 0},
		{"scope.allocater.github.io", "scope.allocator.github.io", 1},
		{"scopes.allocator.github.io", "scope.allocator.github.io", 1},
		{"scope.allocator.github.com", "scope.allocator.github.io", 2},
		{"allocator.github.io", "scope.allocator.github.io", 6},
		{"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func FuzzEditDistance(f *testing.F) {
	f.Add("scope.allocater.github.io", "scope.allocator.github.io")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := editDistance(a, b)
		if d != editDistance(b, a) || d < 0 || d > max(len(a), len(b)) || (d == 0) != (a == b) {
			t.Fatalf("editDistance(%q, %q) = %d: not a distance", a, b, d)
		}
	})
}

// TestScopeFullHintNamesFallback: the hint of a full scope spells the
// fallback annotation as this package does.
func TestScopeFullHintNamesFallback(t *testing.T) {
	t.Parallel()
	hint := (&allocation.ScopeFullError{ServiceCIDRs: []string{"team-a"}}).Hint()
	if !strings.Contains(hint, FallbackAnnotation+`: "true"`) || !strings.Contains(hint, `"team-a"`) {
		t.Fatalf("hint %q does not name %s or the ServiceCIDR", hint, FallbackAnnotation)
	}
}
