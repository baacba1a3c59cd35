package model

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in        string
		allowAuto bool
		want      Name
		wantErr   bool
	}{
		{"bitmap", false, Bitmap, false},
		{"ipaddress", true, IPAddress, false},
		{"auto", true, Auto, false},
		{"auto", false, "", true},
		{"Bitmap", true, "", true},
		{"", true, "", true},
	} {
		got, err := Parse(tt.in, tt.allowAuto)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q, %v) = %q, %v", tt.in, tt.allowAuto, got, err)
		}
	}
}
