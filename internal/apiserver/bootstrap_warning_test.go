package apiserver

import (
	"strings"
	"testing"
)

// TestRangeMismatchSaysWhatIsInEffect: the warning of a flag the default
// ServiceCIDR cannot follow names both ranges, which one is in effect in
// the server's model, and the two ways out.
func TestRangeMismatchSaysWhatIsInEffect(t *testing.T) {
	t.Parallel()
	got := rangeMismatch([]string{"10.96.0.0/16"}, []string{"10.100.0.0/16"}, true)
	want := `--service-cluster-ip-range is 10.100.0.0/16 but the stored default ServiceCIDR "kubernetes" has 10.96.0.0/16, ` +
		`and a ServiceCIDR can only grow from single- to dual-stack, so it is left as it is: ` +
		`the stored ServiceCIDR is in effect: this server allocates from the ServiceCIDRs, so new ClusterIPs come from 10.96.0.0/16 ` +
		`and 10.100.0.0/16 is served only where another ServiceCIDR holds it. ` +
		`To keep the stored range, set --service-cluster-ip-range=10.96.0.0/16 on every replica; ` +
		`to move to the flag's range, follow "Replacing the default range" in docs/operations.md ` +
		`(add a ServiceCIDR with 10.100.0.0/16, drain and renumber "kubernetes", then delete it: it is re-created from the flag)`
	if got != want {
		t.Errorf("IPAddress model:\n got %s\nwant %s", got, want)
	}
	bitmap := rangeMismatch([]string{"10.96.0.0/16", "fd00::/108"}, []string{"10.100.0.0/16"}, false)
	for _, part := range []string{
		"--service-cluster-ip-range is 10.100.0.0/16 but the stored default ServiceCIDR \"kubernetes\" has 10.96.0.0/16,fd00::/108",
		"this server (--allocator=bitmap) allocates from the flag's 10.100.0.0/16",
		"set --service-cluster-ip-range=10.96.0.0/16,fd00::/108 on every replica",
	} {
		if !strings.Contains(bitmap, part) {
			t.Errorf("bitmap model: %q lacks %q", bitmap, part)
		}
	}
}
