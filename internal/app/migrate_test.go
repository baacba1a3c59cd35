package app

import "testing"

// TestMigrateTarget: a missing or unknown --to is refused at once, in one
// line that points at the help.
func TestMigrateTarget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate"}, "error: --to is required (bitmap or ipaddress); see allocator migrate --help\n"},
		{[]string{"migrate", "--to", "ipaddresses"}, "error: --to \"ipaddresses\": must be bitmap or ipaddress; see allocator migrate --help\n"},
	} {
		if _, stderr, code := runApp(t, tt.args...); code != 1 || stderr != tt.want {
			t.Errorf("%v: exit %d, stderr %q; want %q", tt.args, code, stderr, tt.want)
		}
	}
}
