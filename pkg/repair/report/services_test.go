package report

import (
	"strings"
	"testing"
)

func TestCompareJoined(t *testing.T) {
	t.Parallel()
	cases := [][4]string{
		{"a", "b", "a", "b"},
		{"a", "b", "a-x", "b"}, // '-' sorts before '/'
		{"a", "b", "a0", "b"},  // '0' sorts after '/'
		{"default", "web", "default", "web-1"},
		{"", "", "", "x"},
		{"ns", "", "ns", ""},
		{"a/b", "c", "a", "b/c"}, // the same joined text
		{"kube-system", "dns", "kube", "system"},
	}
	for _, c := range cases {
		want := strings.Compare(c[0]+"/"+c[1], c[2]+"/"+c[3])
		if got := compareJoined(c[0], c[1], c[2], c[3]); got != want {
			t.Errorf("compareJoined(%q, %q, %q, %q) = %d, want %d", c[0], c[1], c[2], c[3], got, want)
		}
		if got := compareJoined(c[2], c[3], c[0], c[1]); got != -want {
			t.Errorf("compareJoined(%q, %q, %q, %q) = %d, want %d", c[2], c[3], c[0], c[1], got, -want)
		}
	}
}

func FuzzCompareJoined(f *testing.F) {
	f.Add("a", "b", "a-x", "b")
	f.Add("default", "web", "default", "web-1")
	f.Fuzz(func(t *testing.T, ns1, name1, ns2, name2 string) {
		want := strings.Compare(ns1+"/"+name1, ns2+"/"+name2)
		if got := compareJoined(ns1, name1, ns2, name2); got != want {
			t.Fatalf("compareJoined(%q, %q, %q, %q) = %d, want %d", ns1, name1, ns2, name2, got, want)
		}
	})
}
