package lifecycle

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

var annotationsPath = field.NewPath("metadata", "annotations")

func TestParseAndValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      map[string]string
		want    Mode
		wantErr string // substring of Validate's (and Parse's, when a value is bad) error; "" means valid
	}{
		{name: "none", in: nil, want: Automatic},
		{name: "other annotations", in: map[string]string{"example.com/x": "y"}, want: Automatic},
		{name: "draining", in: map[string]string{DrainingAnnotation: "true"}, want: Draining},
		{name: "draining false", in: map[string]string{DrainingAnnotation: "false"}, want: Automatic},
		{name: "manual-only", in: map[string]string{ManualOnlyAnnotation: "true"}, want: Manual},
		{name: "manual-only false", in: map[string]string{ManualOnlyAnnotation: "false"}, want: Automatic},
		{name: "draining wins over manual-only", in: map[string]string{ManualOnlyAnnotation: "true", DrainingAnnotation: "true"}, want: Draining},
		{name: "manual-only, not draining", in: map[string]string{ManualOnlyAnnotation: "true", DrainingAnnotation: "false"}, want: Manual},
		{name: "beside a scope", in: map[string]string{scope.NamespaceSelectorAnnotation: "team=a", ManualOnlyAnnotation: "true"}, want: Manual},
		{name: "draining yes reads as draining", in: map[string]string{DrainingAnnotation: "yes"}, want: Draining, wantErr: `must be "true" or "false"`},
		{name: "draining True reads as draining", in: map[string]string{DrainingAnnotation: "True"}, want: Draining, wantErr: `must be "true" or "false"`},
		{name: "manual-only empty reads as draining", in: map[string]string{ManualOnlyAnnotation: ""}, want: Draining, wantErr: `must be "true" or "false"`},
		{name: "unknown key", in: map[string]string{Prefix + "drained": "true"}, want: Automatic, wantErr: "Unsupported value"},
		{name: "misspelled prefix", in: map[string]string{"lifecycle.allocater.github.io/draining": "true"}, want: Automatic,
			wantErr: `annotation prefix "lifecycle.allocater.github.io/" is not the lifecycle prefix "lifecycle.allocator.github.io/": did you mean lifecycle.allocator.github.io/draining?`},
		{name: "plural prefix", in: map[string]string{"lifecycles.allocator.github.io/manual-only": "true"}, want: Automatic, wantErr: "did you mean lifecycle.allocator.github.io/manual-only?"},
		{name: "far from the prefix", in: map[string]string{"allocator.github.io/service-uid": "x", "example.com/lifecycle": "y", "no-slash": "z"}, want: Automatic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, parseErr := Parse(tc.in)
			if got != tc.want {
				t.Errorf("Parse = %v, want %v", got, tc.want)
			}
			errs := Validate(tc.in, annotationsPath)
			if tc.wantErr == "" {
				if len(errs) > 0 || parseErr != nil {
					t.Fatalf("Validate = %v, Parse error %v; want both valid", errs, parseErr)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", errs, tc.wantErr)
			}
			// Parse reads values only: a bad value is its error, a bad key is not.
			if badValue := strings.Contains(tc.wantErr, `"true" or "false"`); (parseErr != nil) != badValue {
				t.Errorf("Parse error = %v, want one: %v", parseErr, badValue)
			}
		})
	}
}

// TestFamiliesAreNotMisspellingsOfEachOther: the scope and lifecycle
// prefixes are far apart, so neither family's typo check refuses the other's
// annotations.
func TestFamiliesAreNotMisspellingsOfEachOther(t *testing.T) {
	t.Parallel()
	both := map[string]string{
		scope.NamespaceSelectorAnnotation: "team=a",
		DrainingAnnotation:                "true",
		ManualOnlyAnnotation:              "false",
	}
	if errs := Validate(both, annotationsPath); len(errs) > 0 {
		t.Errorf("lifecycle.Validate: %v", errs)
	}
	if errs := scope.Validate(both, annotationsPath); len(errs) > 0 {
		t.Errorf("scope.Validate: %v", errs)
	}
}

func TestModeString(t *testing.T) {
	t.Parallel()
	for m, want := range map[Mode]string{Automatic: "", Manual: "manual-only", Draining: "draining"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", m, got, want)
		}
	}
	if !Automatic.Dynamic() || Manual.Dynamic() || Draining.Dynamic() {
		t.Error("only Automatic takes dynamic picks")
	}
	if !Automatic.Static() || !Manual.Static() || Draining.Static() {
		t.Error("every mode but Draining takes user-chosen ClusterIPs")
	}
}

// FuzzParse: Parse and Validate agree. Whatever Validate accepts parses
// without error; whatever Parse refuses, Validate refuses and Parse reads
// as Draining.
func FuzzParse(f *testing.F) {
	f.Add("draining", "true", "manual-only", "false")
	f.Add("manual-only", "true", "x", "y")
	f.Add("draining", "yes", "manual-only", "")
	f.Add("drained", "true", "draining", "false")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{Prefix + k1: v1, Prefix + k2: v2}
		mode, err := Parse(in)
		errs := Validate(in, annotationsPath)
		if err != nil {
			if mode != Draining {
				t.Fatalf("Parse(%v) = %v with error %v; a bad value must read as Draining", in, mode, err)
			}
			if len(errs) == 0 {
				t.Fatalf("Parse(%v) refused (%v) what Validate accepts", in, err)
			}
		}
		if len(errs) == 0 && err != nil {
			t.Fatalf("Validate accepts %v, Parse refuses it: %v", in, err)
		}
		if mode < Automatic || mode > Draining {
			t.Fatalf("Parse(%v) = %d: not a mode", in, mode)
		}
	})
}
