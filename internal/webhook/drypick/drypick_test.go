package drypick

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string // nil: not ours
	}{
		{Warning([]string{"10.96.0.10"}), []string{"10.96.0.10"}},
		{Warning([]string{"10.96.0.10", "fd00::a"}), []string{"10.96.0.10", "fd00::a"}},
		{"dry run: the create would get ClusterIP(s) ", nil},
		{"dry run: the create would get ClusterIP(s) 10.96.0.010", nil}, // not canonical
		{"dry run: the create would get ClusterIP(s) fd00::A", nil},
		{"dry run: the create would get ClusterIP(s) 10.96.0.10,", nil},
		{"dry run: the create would get ClusterIP(s) 10.96.0.0/16", nil},
		{"ServiceCIDR old is draining", nil},
		{"", nil},
	} {
		got, ok := Parse(c.text)
		if ok != (c.want != nil) {
			t.Errorf("Parse(%q): ok %v, want %v", c.text, ok, c.want != nil)
			continue
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !slices.Equal(s, c.want) {
			t.Errorf("Parse(%q) = %v, want %v", c.text, s, c.want)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts is given back by
// Warning exactly.
func FuzzParse(f *testing.F) {
	f.Add(Warning([]string{"10.96.0.10", "fd00::a"}))
	f.Add("dry run: the create would get ClusterIP(s) ::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, text string) {
		got, ok := Parse(text)
		if !ok {
			return
		}
		var s []string
		for _, a := range got {
			if !a.IsValid() || a != netip.MustParseAddr(a.String()) {
				t.Fatalf("Parse(%q) gave %v", text, a)
			}
			s = append(s, a.String())
		}
		if Warning(s) != text {
			t.Fatalf("Parse(%q) = %v, whose Warning is %q", text, s, Warning(s))
		}
	})
}
