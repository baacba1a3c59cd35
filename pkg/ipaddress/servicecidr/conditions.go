package servicecidr

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// ConditionPrefix is the prefix of every condition type this controller
// owns besides upstream's Ready. Conditions of other types (upstream's, or
// another controller's) are never written or dropped.
const ConditionPrefix = "allocator.github.io/"

// The condition types this controller keeps on every ServiceCIDR.
const (
	// ConditionCapacityIPv4 and ConditionCapacityIPv6 are True while the
	// family's CIDR has a free address; the message gives size, used and
	// free. Present only for the families the ServiceCIDR carries.
	ConditionCapacityIPv4 = ConditionPrefix + "CapacityIPv4"
	ConditionCapacityIPv6 = ConditionPrefix + "CapacityIPv6"
	// ConditionDraining is True while the lifecycle annotation drains the
	// ServiceCIDR; the message says how many Services still hold addresses
	// in it.
	ConditionDraining = ConditionPrefix + "Draining"
	// ConditionManualOnly is True while the ServiceCIDR serves only
	// user-chosen ClusterIPs.
	ConditionManualOnly = ConditionPrefix + "ManualOnly"
	// ConditionOverlapping is True while another ServiceCIDR has a CIDR
	// that overlaps one of this one's; the message names them.
	ConditionOverlapping = ConditionPrefix + "Overlapping"
)

// The reasons of the conditions above.
const (
	ReasonAvailable  = "Available"        // Capacity True: some address is free
	ReasonFull       = "Full"             // Capacity False: no address is free
	ReasonDraining   = "Draining"         // Draining True: Services still hold addresses in it
	ReasonDrained    = "Drained"          // Draining True: no Service holds an address in it; it can be deleted
	ReasonInvalid    = "InvalidLifecycle" // Draining True: a lifecycle value that reads as draining
	ReasonOpen       = "Open"             // Draining False, ManualOnly False
	ReasonManualOnly = "ManualOnly"       // ManualOnly True
	ReasonOverlaps   = "Overlaps"         // Overlapping True
	ReasonNoOverlap  = "NoOverlap"        // Overlapping False
	// ReasonDeleting: Draining True, ManualOnly False: the ServiceCIDR is
	// being deleted and takes no new allocation.
	ReasonDeleting = "Deleting"
	// ReasonInsideDraining: Draining True: every CIDR of it lies in a
	// draining ServiceCIDR, whose lifecycle wins.
	ReasonInsideDraining = "InsideDraining"
	// ReasonPartlyDraining: Draining False: a draining ServiceCIDR overlaps
	// it, and its addresses take no new allocation.
	ReasonPartlyDraining = "PartlyDraining"
	// ReasonInsideManualOnly: ManualOnly True: every CIDR of it lies in a
	// manual-only (or draining) ServiceCIDR.
	ReasonInsideManualOnly = "InsideManualOnly"
	// ReasonPartlyManualOnly: ManualOnly False: a manual-only ServiceCIDR
	// overlaps it, and its addresses take no dynamic pick.
	ReasonPartlyManualOnly = "PartlyManualOnly"
)

// maxOverlapNames is how many overlapping ServiceCIDRs a message names
// before it gives a count of the rest: the message stays short enough to
// read in `kubectl get -o yaml` whatever the number of ServiceCIDRs.
const maxOverlapNames = 10

// namedCIDR is a ServiceCIDR's name, parsed prefixes, lifecycle mode (as
// the allocators read it) and whether it is being deleted.
type namedCIDR struct {
	name     string
	prefixes []netip.Prefix
	mode     lifecycle.Mode
	deleting bool
}

// conditionInput is what the conditions of one ServiceCIDR are computed
// from: the ServiceCIDR, the addresses of the IPAddresses inside its
// prefixes, the Services holding them, and every other ServiceCIDR.
type conditionInput struct {
	sc    *networkingv1.ServiceCIDR
	addrs []netip.Addr
	// services counts the Services that hold an address inside ranges,
	// each once; only the messages of a ServiceCIDR that takes no new
	// allocation ask for it (servicesHolding).
	services func(ranges []subrange.Range) int
	others   []namedCIDR
}

// computeConditions returns the conditions this controller owns for in.sc,
// in a fixed order, without LastTransitionTime (set when written). The
// result depends only on the input, so every replica computing it from the
// same caches computes the same conditions, and writes nothing when they
// are stored already.
func computeConditions(in conditionInput) []metav1.Condition {
	var out []metav1.Condition
	var ranges []subrange.Range
	for _, p := range prefixes(in.sc) {
		if r, err := subrange.New(p, model.IPAddress); err == nil {
			ranges = append(ranges, r)
		}
	}
	used := make([]uint64, len(ranges))
	for _, addr := range in.addrs {
		for i, r := range ranges {
			if r.Contains(addr) {
				used[i]++
			}
		}
	}
	for _, family := range []struct {
		v6   bool
		kind string
	}{{false, ConditionCapacityIPv4}, {true, ConditionCapacityIPv6}} {
		if c, ok := capacityCondition(family.kind, family.v6, ranges, used); ok {
			out = append(out, c)
		}
	}
	out = append(out, lifecycleConditions(in.sc, func() int { return in.services(ranges) }, in.others)...)
	return append(out, overlapCondition(in.sc.Name, prefixes(in.sc), in.others))
}

// servicesHolding counts the Services that hold an address of ips inside
// ranges, each once (a dual-stack one may hold one of each family). It
// reads every IPAddress and keeps a set of their Services, work that would
// be most of the conditions of a ServiceCIDR holding hundreds of thousands
// of addresses, were they not asked for only by a ServiceCIDR that takes
// no new allocation.
func servicesHolding(ips []*networkingv1.IPAddress, ranges []subrange.Range) int {
	type serviceKey struct{ namespace, name string }
	services := map[serviceKey]struct{}{}
	for _, ipa := range ips {
		if !ipaddress.ParentIsService(ipa) {
			continue
		}
		addr, err := netip.ParseAddr(ipa.Name)
		if err != nil {
			continue
		}
		for _, r := range ranges {
			if r.Contains(addr) {
				services[serviceKey{ipa.Spec.ParentRef.Namespace, ipa.Spec.ParentRef.Name}] = struct{}{}
				break
			}
		}
	}
	return len(services)
}

// capacityCondition is the capacity of the family's ranges (one, as a
// ServiceCIDR carries one CIDR per family); false when it has none. Sizes
// are big.Int: an IPv6 /64 holds 2^64−1 addresses, beyond int64.
func capacityCondition(kind string, v6 bool, ranges []subrange.Range, used []uint64) (metav1.Condition, bool) {
	var parts []string
	size, free := new(big.Int), new(big.Int)
	for i, r := range ranges {
		if r.IPv6() != v6 {
			continue
		}
		s := new(big.Int).SetUint64(r.Size())
		f := new(big.Int).Sub(s, new(big.Int).SetUint64(used[i]))
		if f.Sign() < 0 {
			f.SetInt64(0)
		}
		size.Add(size, s)
		free.Add(free, f)
		parts = append(parts, fmt.Sprintf("%s: size %s, used %d, free %s", r.Prefix(), s, used[i], f))
	}
	if len(parts) == 0 {
		return metav1.Condition{}, false
	}
	c := metav1.Condition{Type: kind, Status: metav1.ConditionTrue, Reason: ReasonAvailable, Message: strings.Join(parts, "; ")}
	if free.Sign() == 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonFull
	}
	return c, true
}

// overlapCondition names the other ServiceCIDRs with a CIDR overlapping
// one of mine, sorted by name.
func overlapCondition(name string, mine []netip.Prefix, others []namedCIDR) metav1.Condition {
	var hits []string
	for _, o := range others {
		if o.name == name {
			continue
		}
		var with []string
		for _, p := range o.prefixes {
			if slices.ContainsFunc(mine, p.Overlaps) {
				with = append(with, p.String())
			}
		}
		if len(with) > 0 {
			hits = append(hits, fmt.Sprintf("%q (%s)", o.name, strings.Join(with, ", ")))
		}
	}
	if len(hits) == 0 {
		return metav1.Condition{Type: ConditionOverlapping, Status: metav1.ConditionFalse, Reason: ReasonNoOverlap,
			Message: "no other ServiceCIDR overlaps it"}
	}
	slices.Sort(hits)
	text := strings.Join(hits[:min(len(hits), maxOverlapNames)], ", ")
	if len(hits) > maxOverlapNames {
		text += fmt.Sprintf(" and %d more", len(hits)-maxOverlapNames)
	}
	return metav1.Condition{Type: ConditionOverlapping, Status: metav1.ConditionTrue, Reason: ReasonOverlaps,
		Message: "overlaps ServiceCIDR " + text}
}

// conditionsStored reports whether stored already carries want (type,
// status, reason and message) and none of our types beyond them.
func conditionsStored(stored, want []metav1.Condition) bool {
	for _, w := range want {
		c := meta.FindStatusCondition(stored, w.Type)
		if c == nil || c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message {
			return false
		}
	}
	for _, c := range stored {
		if ours(c.Type) && meta.FindStatusCondition(want, c.Type) == nil {
			return false
		}
	}
	return true
}

// applyConditions sets want in conds, keeping every condition of another
// owner, and drops ours that want no longer has. A condition whose status
// is unchanged keeps its LastTransitionTime.
func applyConditions(conds *[]metav1.Condition, want []metav1.Condition, now metav1.Time) {
	*conds = slices.DeleteFunc(*conds, func(c metav1.Condition) bool {
		return ours(c.Type) && meta.FindStatusCondition(want, c.Type) == nil
	})
	for _, w := range want {
		w.LastTransitionTime = now
		meta.SetStatusCondition(conds, w)
	}
}

// ours reports whether this controller owns a condition type (Ready aside).
func ours(conditionType string) bool { return strings.HasPrefix(conditionType, ConditionPrefix) }

// ourConditions returns the conditions of ours in conds.
func ourConditions(conds []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range conds {
		if ours(c.Type) {
			out = append(out, c)
		}
	}
	return out
}
