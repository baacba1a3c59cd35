package subrange

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string // empty: accepted
	}{
		{"10.0.0.1", ""},
		{"0.0.0.0", ""},
		{"fd00::1", ""},
		{"2001:db8::", ""},
		{"::1", ""},
		{"fd00::ffff:ffff:ffff:ffff", ""},
		{"", "empty"},
		{"10.0.0.01", "leading zeros"},
		{"010.0.0.1", "leading zeros"},
		{"::ffff:10.0.0.1", "IPv4-mapped"},
		{"fd00::1%eth0", "zones"},
		{"FD00::1", "canonical form, use fd00::1"},
		{"fd00:0:0:0:0:0:0:1", "canonical form, use fd00::1"},
		{"fd00::0001", "canonical form, use fd00::1"},
		{"10.0.0.0/24", "a CIDR where an IP address is expected"},
		{"10.0.0.256", "not an IP address"},
		{"10.0.0", "not an IP address"},
		{" 10.0.0.1", "not an IP address"},
		{"None", "not an IP address"},
		{"1.2.3.4.5", "not an IP address"},
	}
	for _, tt := range tests {
		addr, err := ParseAddr(tt.in)
		if tt.wantErr == "" {
			if err != nil || addr.String() != tt.in {
				t.Errorf("ParseAddr(%q) = %v, %v; want it accepted", tt.in, addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseAddr(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseAddr(%q): errors.Is(err, ErrInvalid) = false", tt.in)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string
	}{
		{"10.96.0.0/16", ""},
		{"10.0.0.0/8", ""},
		{"fd00:10:96::/112", ""},
		{"fd00::/64", ""},
		{"10.0.0.1/32", ""},
		{"", "empty"},
		{"10.0.0.1", "an IP address where a CIDR is expected"},
		{"10.96.0.1/16", "host bits are set, the network is 10.96.0.0/16"},
		{"fd00::1/64", "host bits are set, the network is fd00::/64"},
		{"010.96.0.0/16", "leading zeros"},
		{"10.96.0.0/016", "not a CIDR"},
		{"::ffff:10.0.0.0/120", "IPv4-mapped"},
		{"fd00::%eth0/64", "zones"},
		{"FD00::/64", "canonical form, use fd00::/64"},
		{"fd00:0::/64", "canonical form, use fd00::/64"},
		{"10.0.0.0/33", "not a CIDR"},
		{"10.0.0.0/", "not a CIDR"},
		{"10.0.0.0/-1", "not a CIDR"},
	}
	for _, tt := range tests {
		prefix, err := ParsePrefix(tt.in)
		if tt.wantErr == "" {
			if err != nil || prefix.String() != tt.in {
				t.Errorf("ParsePrefix(%q) = %v, %v; want it accepted", tt.in, prefix, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParsePrefix(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePrefix(%q): errors.Is(err, ErrInvalid) = false", tt.in)
		}
	}
}

// FuzzParse checks that whatever the parsers accept is canonical: it prints
// back to exactly the input, so two different texts never name one address.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "fd00::1", "10.96.0.0/16", "fd00::/64", "::ffff:1.2.3.4", "FD00::1",
		"10.0.0.01", "fd00::1%eth0", "1.2.3.4/33", "fd00::1/64", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if addr, err := ParseAddr(s); err == nil {
			if addr.String() != s || addr.Is4In6() || addr.Zone() != "" {
				t.Fatalf("ParseAddr accepted non-canonical %q (%s)", s, addr)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseAddr(%q) error %v is not ErrInvalid", s, err)
		}
		if prefix, err := ParsePrefix(s); err == nil {
			if prefix.String() != s || prefix.Masked() != prefix || prefix.Addr().Is4In6() {
				t.Fatalf("ParsePrefix accepted non-canonical %q (%s)", s, prefix)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParsePrefix(%q) error %v is not ErrInvalid", s, err)
		}
	})
}
