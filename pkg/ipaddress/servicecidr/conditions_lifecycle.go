package servicecidr

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// closedWins ends the messages of a ServiceCIDR whose addresses another
// ServiceCIDR's lifecycle closes: the rule the allocators apply
// (pkg/ipaddress, lifecycle.go).
const closedWins = "where ServiceCIDRs overlap, the most closed lifecycle wins"

// closers are the other ServiceCIDRs (not being deleted) whose lifecycle
// closes some of a ServiceCIDR's addresses, by mode.
type closers struct {
	// names are `"old" (10.0.1.0/24)` entries of the ServiceCIDRs of each
	// mode overlapping one of mine, sorted.
	draining, manual []string
	// coveredDraining: every prefix of mine lies in a draining one's;
	// coveredClosed: in a draining or manual-only one's.
	coveredDraining, coveredClosed bool
}

// closersOf finds the closers of ServiceCIDR name with prefixes mine.
func closersOf(name string, mine []netip.Prefix, others []namedCIDR) closers {
	var c closers
	c.coveredDraining, c.coveredClosed = len(mine) > 0, len(mine) > 0
	for _, p := range mine {
		draining, closed := false, false
		for _, o := range others {
			if o.name == name || o.deleting || o.mode == lifecycle.Automatic {
				continue
			}
			for _, q := range o.prefixes {
				if !q.Overlaps(p) {
					continue
				}
				entry := fmt.Sprintf("%q (%s)", o.name, q)
				if o.mode == lifecycle.Draining {
					c.draining = append(c.draining, entry)
				} else {
					c.manual = append(c.manual, entry)
				}
				if q.Bits() <= p.Bits() {
					closed = true
					draining = draining || o.mode == lifecycle.Draining
				}
			}
		}
		c.coveredDraining = c.coveredDraining && draining
		c.coveredClosed = c.coveredClosed && closed
	}
	c.draining, c.manual = boundedNames(c.draining), boundedNames(c.manual)
	return c
}

// boundedNames sorts entries, each once, and keeps maxOverlapNames of them
// and a count of the rest ("and 3 more").
func boundedNames(entries []string) []string {
	slices.Sort(entries)
	entries = slices.Compact(entries)
	if len(entries) > maxOverlapNames {
		entries = append(entries[:maxOverlapNames:maxOverlapNames], fmt.Sprintf("and %d more", len(entries)-maxOverlapNames))
	}
	return entries
}

// lifecycleConditions are Draining and ManualOnly, read from the lifecycle
// annotations as the allocators read them (lifecycle.Parse: an invalid
// value drains), from the deletion (a ServiceCIDR being deleted takes no
// new allocation), and from the other ServiceCIDRs that overlap it: a
// draining or manual-only one closes the addresses they share. services
// counts the Services holding an address in it; it is called only for the
// message of a ServiceCIDR that takes no new allocation.
func lifecycleConditions(sc *networkingv1.ServiceCIDR, services func() int, others []namedCIDR) []metav1.Condition {
	mode, err := lifecycle.Parse(sc.Annotations)
	cl := closersOf(sc.Name, prefixes(sc), others)
	held := func() (string, int) {
		n := services()
		switch n {
		case 0:
			return "no Service holds an address in it", n
		case 1:
			return "1 Service still holds an address in it", n
		}
		return fmt.Sprintf("%d Services still hold addresses in it", n), n
	}
	deleting := sc.DeletionTimestamp != nil
	draining := metav1.Condition{Type: ConditionDraining, Status: metav1.ConditionTrue}
	switch {
	case deleting:
		text, _ := held()
		draining.Reason, draining.Message = ReasonDeleting, "being deleted: takes no new allocation; "+text
	case err != nil:
		text, _ := held()
		draining.Reason, draining.Message = ReasonInvalid, fmt.Sprintf("%v; %s", err, text)
	case mode == lifecycle.Draining:
		if text, n := held(); n > 0 {
			draining.Reason, draining.Message = ReasonDraining, "takes no new allocation; "+text
		} else {
			draining.Reason, draining.Message = ReasonDrained, "takes no new allocation; no Service holds an address in it, it can be deleted"
		}
	case cl.coveredDraining:
		text, _ := held()
		draining.Reason, draining.Message = ReasonInsideDraining, fmt.Sprintf("takes no new allocation: it lies in draining ServiceCIDR %s, and %s; %s",
			strings.Join(cl.draining, ", "), closedWins, text)
	case len(cl.draining) > 0:
		draining.Status, draining.Reason, draining.Message = metav1.ConditionFalse, ReasonPartlyDraining,
			fmt.Sprintf("takes new allocations, but none inside draining ServiceCIDR %s: %s", strings.Join(cl.draining, ", "), closedWins)
	default:
		draining.Status, draining.Reason, draining.Message = metav1.ConditionFalse, ReasonOpen, "takes new allocations"
	}
	return []metav1.Condition{draining, manualOnlyCondition(mode, deleting || draining.Status == metav1.ConditionTrue, deleting, cl)}
}

// manualOnlyCondition is ManualOnly for a ServiceCIDR of mode; closed: it
// takes no new allocation at all (its Draining condition is True).
func manualOnlyCondition(mode lifecycle.Mode, closed, deleting bool, cl closers) metav1.Condition {
	c := metav1.Condition{Type: ConditionManualOnly, Status: metav1.ConditionFalse}
	switch {
	case deleting:
		c.Reason, c.Message = ReasonDeleting, "being deleted: takes no new allocation"
	case closed:
		c.Reason, c.Message = ReasonDraining, "draining: takes no new allocation"
	case mode == lifecycle.Manual:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonManualOnly, "takes user-chosen ClusterIPs only, never a dynamic pick"
	case cl.coveredClosed:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonInsideManualOnly,
			fmt.Sprintf("takes user-chosen ClusterIPs only, never a dynamic pick: it lies in manual-only ServiceCIDR %s, and %s",
				strings.Join(cl.manual, ", "), closedWins)
	case len(cl.manual) > 0:
		c.Reason, c.Message = ReasonPartlyManualOnly,
			fmt.Sprintf("takes dynamic picks and user-chosen ClusterIPs, but no dynamic pick inside manual-only ServiceCIDR %s: %s",
				strings.Join(cl.manual, ", "), closedWins)
	default:
		c.Reason, c.Message = ReasonOpen, "takes dynamic picks and user-chosen ClusterIPs"
	}
	return c
}
