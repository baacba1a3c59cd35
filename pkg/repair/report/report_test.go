package report

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStanding: a fixed finding is resolved whatever its type; a Service
// outside its scope is by design; a foreign IPAddress is by design when it
// references a Service that does not hold it (leak) or holds its Service's
// address with other labels (repair), and a duplicate when it holds the
// address for another parent; everything else left fails the job.
func TestStanding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Problem
		want Standing
	}{
		{"leak freed", Problem{Type: TypeLeak, Fixed: true}, Resolved},
		{"missing IPAddress created", Problem{Type: TypeRepair, Reason: ReasonNotAllocated, Fixed: true}, Resolved},
		{"leak not freed yet", Problem{Type: TypeLeak}, Unresolved},
		{"orphan IPAddress in its grace", Problem{Type: TypeLeak, Service: "default/gone"}, Unresolved},
		{"repair not done (dry run)", Problem{Type: TypeRepair, Reason: ReasonNotAllocated}, Unresolved},
		{"duplicate", Problem{Type: TypeDuplicate, Reason: ReasonAlreadyAllocated}, Unresolved},
		{"out of range", Problem{Type: TypeOutOfRange, Reason: ReasonOutOfRange}, Unresolved},
		{"invalid", Problem{Type: TypeInvalid, Reason: ReasonNotValid}, Unresolved},
		{"range full", Problem{Type: TypeFull, Reason: ReasonCIDRFull}, Unresolved},
		{"unknown", Problem{Type: TypeUnknown, Reason: ReasonUnknown}, Unresolved},
		{"models disagree", Problem{Type: "disagreement"}, Unresolved},
		{"node-port leak", Problem{Type: TypeLeak, Resource: "nodePort"}, Unresolved},
		{"out of scope", Problem{Type: TypeOutOfScope, Reason: ReasonOutOfScope}, ByDesign},
		{"foreign IPAddress of a Service that does not hold it", Problem{Type: TypeLeak, Foreign: true}, ByDesign},
		{"foreign IPAddress of its Service, other labels", Problem{Type: TypeRepair, Foreign: true}, ByDesign},
		{"foreign IPAddress holding another's address", Problem{Type: TypeDuplicate, Reason: ReasonAlreadyAllocated, Foreign: true}, Unresolved},
		{"foreign and out of range", Problem{Type: TypeOutOfRange, Foreign: true}, Unresolved},
	} {
		if got := tc.p.Standing(); got != tc.want {
			t.Errorf("%s: %+v is %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

// TestReportCounts: Unresolved counts only what fails the job; what is
// left by design is counted apart.
func TestReportCounts(t *testing.T) {
	t.Parallel()
	r := &Report{Model: "ipaddress", Problems: []Problem{
		{Type: TypeLeak, Fixed: true},
		{Type: TypeOutOfScope},
		{Type: TypeLeak, Foreign: true},
		{Type: TypeDuplicate},
	}}
	got := []int{r.Unresolved(), r.LeftByDesign(), len(r.Problems)}
	if diff := cmp.Diff([]int{1, 2, 4}, got); diff != "" {
		t.Errorf("unresolved, by design, all (-want +got):\n%s", diff)
	}
	if want := "ipaddress repair: 0 services, 0 allocated, 4 problems (1 unresolved, 2 by design), 0 writes, 0s"; r.String() != want {
		t.Errorf("String() = %q, want %q", r.String(), want)
	}
}
