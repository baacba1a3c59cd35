package servicecidr

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// TestLifecycleConditionsOfOverlapsAndDeletion: the Draining and ManualOnly
// conditions say what the allocators do: a draining or manual-only
// ServiceCIDR closes the addresses it shares with an open one (the most
// closed lifecycle wins), and a ServiceCIDR being deleted takes no new
// allocation; one being deleted closes nothing of the others.
func TestLifecycleConditionsOfOverlapsAndDeletion(t *testing.T) {
	t.Parallel()
	named := func(name string, mode lifecycle.Mode, deleting bool, cidrs ...string) namedCIDR {
		n := namedCIDR{name: name, mode: mode, deleting: deleting}
		for _, c := range cidrs {
			n.prefixes = append(n.prefixes, netip.MustParsePrefix(c))
		}
		return n
	}
	const wins = "where ServiceCIDRs overlap, the most closed lifecycle wins"
	closedManual := cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDraining, "draining: takes no new allocation")
	now := metav1.Now()
	deleting := testCIDR("gone", nil, "10.9.0.0/24")
	deleting.DeletionTimestamp = &now
	tests := []struct {
		name     string
		sc       string // a ServiceCIDR of tests' own, by name
		services int
		others   []namedCIDR
		want     []metav1.Condition
	}{{
		name:   "open, with a draining one inside",
		sc:     "new",
		others: []namedCIDR{named("old2", lifecycle.Draining, false, "10.5.1.0/24"), named("apart", lifecycle.Draining, false, "10.6.0.0/24")},
		want: []metav1.Condition{
			cond(ConditionDraining, metav1.ConditionFalse, ReasonPartlyDraining,
				`takes new allocations, but none inside draining ServiceCIDR "old2" (10.5.1.0/24): `+wins),
			openManual,
		},
	}, {
		name:     "open, inside a draining one",
		sc:       "keep",
		services: 1,
		others:   []namedCIDR{named("drain-wide", lifecycle.Draining, false, "10.0.0.0/8")},
		want: []metav1.Condition{
			cond(ConditionDraining, metav1.ConditionTrue, ReasonInsideDraining,
				`takes no new allocation: it lies in draining ServiceCIDR "drain-wide" (10.0.0.0/8), and `+wins+`; 1 Service still holds an address in it`),
			closedManual,
		},
	}, {
		name:   "open, the same prefix as a draining one",
		sc:     "new",
		others: []namedCIDR{named("shared-drain", lifecycle.Draining, false, "10.5.0.0/16")},
		want: []metav1.Condition{
			cond(ConditionDraining, metav1.ConditionTrue, ReasonInsideDraining,
				`takes no new allocation: it lies in draining ServiceCIDR "shared-drain" (10.5.0.0/16), and `+wins+`; no Service holds an address in it`),
			closedManual,
		},
	}, {
		name:   "open, with a manual-only one inside",
		sc:     "new",
		others: []namedCIDR{named("dns", lifecycle.Manual, false, "10.5.0.0/28")},
		want: []metav1.Condition{
			openDraining,
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonPartlyManualOnly,
				`takes dynamic picks and user-chosen ClusterIPs, but no dynamic pick inside manual-only ServiceCIDR "dns" (10.5.0.0/28): `+wins),
		},
	}, {
		name:   "open, inside a manual-only one",
		sc:     "keep",
		others: []namedCIDR{named("static", lifecycle.Manual, false, "10.0.0.0/8")},
		want: []metav1.Condition{
			openDraining,
			cond(ConditionManualOnly, metav1.ConditionTrue, ReasonInsideManualOnly,
				`takes user-chosen ClusterIPs only, never a dynamic pick: it lies in manual-only ServiceCIDR "static" (10.0.0.0/8), and `+wins),
		},
	}, {
		name:     "being deleted",
		sc:       "gone",
		services: 2,
		want: []metav1.Condition{
			cond(ConditionDraining, metav1.ConditionTrue, ReasonDeleting, "being deleted: takes no new allocation; 2 Services still hold addresses in it"),
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDeleting, "being deleted: takes no new allocation"),
		},
	}, {
		name: "being deleted, emptied",
		sc:   "gone",
		want: []metav1.Condition{
			cond(ConditionDraining, metav1.ConditionTrue, ReasonDeleting, "being deleted: takes no new allocation; no Service holds an address in it"),
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDeleting, "being deleted: takes no new allocation"),
		},
	}, {
		name:   "a draining one being deleted closes nothing",
		sc:     "new",
		others: []namedCIDR{named("old2", lifecycle.Draining, true, "10.5.1.0/24")},
		want:   []metav1.Condition{openDraining, openManual},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obj := testCIDR(tt.sc, nil, map[string]string{"new": "10.5.0.0/16", "keep": "10.1.0.0/29", "gone": "10.9.0.0/24"}[tt.sc])
			if tt.sc == "gone" {
				obj = deleting
			}
			counted := 0
			got := lifecycleConditions(obj, func() int { counted++; return tt.services }, tt.others)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			// The Services are counted, at a cost that grows with the
			// addresses, only for a message that says how many hold one:
			// a ServiceCIDR that takes no new allocation.
			if closed := tt.want[0].Status == metav1.ConditionTrue; counted != map[bool]int{true: 1, false: 0}[closed] {
				t.Errorf("the Services were counted %d times for a Draining condition %s, want %d", counted, tt.want[0].Status, map[bool]int{true: 1, false: 0}[closed])
			}
		})
	}
}
