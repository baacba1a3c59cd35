package nodeport

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         string
		base, size int
		str        string
	}{
		{"30000-32767", 30000, 2768, "30000-32767"},
		{" 30000-32767 ", 30000, 2768, "30000-32767"},
		{"30000+2767", 30000, 2768, "30000-32767"},
		{"1-65535", 1, 65535, "1-65535"},
		{"65534-65535", 65534, 2, "65534-65535"},
		{"100+1", 100, 2, "100-101"},
		{"08080-08090", 8080, 11, "8080-8090"},
	} {
		r, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if r.Base() != tc.base || r.Size() != tc.size || r.String() != tc.str {
			t.Errorf("Parse(%q) = base %d size %d %q, want %d %d %q", tc.in, r.Base(), r.Size(), r.String(), tc.base, tc.size, tc.str)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"30000", "single port"},
		{"32767-30000", "end port cannot be less than start port"},
		{"0-10", "port 0 is not a valid node port"},
		{"a-b", `"a" is not a port number`},
		{"65536", "65536 is greater than 65535"},
		{"30000-65536", "65536 is greater than 65535"},
		{"65535+1", "cannot be greater than 65535"},
		{"", "empty"},
		{"-", "not a port number"},
		{"30000-", "not a port number"},
		{"-30000", "not a port number"},
		{"+1-5", "mixes"},
		{"1+-5", "mixes"},
		{"30000-30000", "single port"},
		{"1e3-2e3", "not a port number"},
		{"123456-123457", "not a port number"},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error containing %q", tc.in, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid containing %q", tc.in, err, tc.want)
		}
	}
}

// TestStaticBandSize checks upstream's node-port band min(max(16, size/32), 128)
// at the sizes the issue lists, and the default range's 86 ports.
func TestStaticBandSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ size, want int }{
		{1, 0}, {2, 0}, {16, 0}, {17, 16}, {32, 16}, {512, 16}, {543, 16}, {544, 17},
		{2768, 86}, {4096, 128}, {4127, 128}, {65535, 128},
	} {
		if got := StaticBandSize(tc.size); got != tc.want {
			t.Errorf("StaticBandSize(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
	if got := MustParse(Default).StaticSize(); got != 86 {
		t.Errorf("default range static band = %d, want 86", got)
	}
}

func TestIndexPort(t *testing.T) {
	t.Parallel()
	r := MustParse("30000-32767")
	for _, tc := range []struct {
		port, slot int
		ok         bool
	}{
		{30000, 0, true}, {30053, 53, true}, {32767, 2767, true},
		{29999, 0, false}, {32768, 0, false}, {0, 0, false}, {-1, 0, false},
	} {
		slot, ok := r.Index(tc.port)
		if slot != tc.slot || ok != tc.ok || r.Contains(tc.port) != tc.ok {
			t.Errorf("Index(%d) = %d, %v, want %d, %v", tc.port, slot, ok, tc.slot, tc.ok)
		}
		if tc.ok {
			if port, ok := r.Port(slot); !ok || port != tc.port {
				t.Errorf("Port(%d) = %d, %v, want %d", slot, port, ok, tc.port)
			}
		}
	}
	if _, ok := r.Port(2768); ok {
		t.Error("Port(2768) is in a 2768-port range")
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	r := MustParse("30000-32767")
	for stored, want := range map[string]bool{
		"30000-32767": true, "30000+2767": true, "30000-32766": false, "10.0.0.0/24": false, "": false,
	} {
		if got := r.Matches(stored); got != want {
			t.Errorf("Matches(%q) = %v, want %v", stored, got, want)
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	if _, err := New(0, 10); err == nil {
		t.Error("New(0, 10) succeeded")
	}
	if _, err := New(65535, 2); err == nil {
		t.Error("New(65535, 2) succeeded")
	}
	r, err := New(30000, 2768)
	if err != nil || r != MustParse(Default) {
		t.Errorf("New(30000, 2768) = %v, %v", r, err)
	}
}

// FuzzParse: Parse never panics, a parsed range stays within 1..65535 with at
// least two ports, and its String parses back to the same range.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"30000-32767", "30000+2767", "30000", "0-10", "a-b", "65536", "1-65535", "-", "+", " 1-2 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if r.Base() < 1 || r.Last() > MaxPort || r.Size() < 2 {
			t.Fatalf("Parse(%q) = %d+%d, outside 1..65535", s, r.Base(), r.Size())
		}
		back, err := Parse(r.String())
		if err != nil || back != r {
			t.Fatalf("Parse(%q).String() = %q parses to %v, %v", s, r.String(), back, err)
		}
		if st := r.StaticSize(); st < 0 || st > 128 || st >= r.Size() {
			t.Fatalf("static band %d of %d ports", st, r.Size())
		}
	})
}
