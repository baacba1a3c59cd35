package servicecidr

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
)

// cidrIndex is every ServiceCIDR with its prefixes and lifecycle, kept by
// the ServiceCIDR event handlers, and an index of their prefixes: the
// ServiceCIDRs that contain an address, or overlap a ServiceCIDR, are found
// without looking at the others (prefixindex). Every IPAddress event looks
// up those containing its address, and every ServiceCIDR event and sync
// those overlapping it, so no event's cost grows with the ServiceCIDRs;
// an event changes the index in place rather than having it rebuilt from
// the cache (a rebuild per event would make creating n ServiceCIDRs cost
// n²).
type cidrIndex struct {
	mu       sync.Mutex
	byName   map[string]namedCIDR      // guarded by mu
	prefixes prefixindex.Index[string] // guarded by mu
	// deleting are the names of those being deleted (a few, usually none):
	// every IPAddress event looks for those containing its address.
	deleting map[string]bool // guarded by mu
}

// namedCIDROf is the index's record of sc.
func namedCIDROf(sc *networkingv1.ServiceCIDR) namedCIDR {
	mode, _ := lifecycle.Parse(sc.Annotations) // an invalid value reads as draining
	return namedCIDR{name: sc.Name, prefixes: prefixes(sc), mode: mode, deleting: sc.DeletionTimestamp != nil}
}

// set files o, in place of the record of the same name.
func (x *cidrIndex) set(o namedCIDR) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(o.name)
	if x.byName == nil {
		x.byName = map[string]namedCIDR{}
	}
	x.byName[o.name] = o
	if o.deleting {
		if x.deleting == nil {
			x.deleting = map[string]bool{}
		}
		x.deleting[o.name] = true
	}
	for _, p := range o.prefixes {
		x.prefixes.Add(p, o.name)
	}
}

// remove drops the record of name.
func (x *cidrIndex) remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(name)
}

func (x *cidrIndex) removeLocked(name string) {
	old, ok := x.byName[name]
	if !ok {
		return
	}
	delete(x.byName, name)
	delete(x.deleting, name)
	for _, p := range old.prefixes {
		x.prefixes.Remove(p, name)
	}
}

// containing returns the names of the ServiceCIDRs with a prefix that
// contains addr; a name may come more than once.
func (x *cidrIndex) containing(addr netip.Addr) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.prefixes.Containing(addr)
}

// overlapping returns the ServiceCIDRs with a prefix that overlaps one of
// ps, each once, sorted by name.
func (x *cidrIndex) overlapping(ps []netip.Prefix) []namedCIDR {
	x.mu.Lock()
	defer x.mu.Unlock()
	names := prefixindex.OverlappingAny(&x.prefixes, ps)
	out := make([]namedCIDR, 0, len(names))
	for _, name := range names {
		out = append(out, x.byName[name])
	}
	return out
}

// terminating returns the ServiceCIDRs being deleted, sorted by name.
func (x *cidrIndex) terminating() []namedCIDR {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]namedCIDR, 0, len(x.deleting))
	for name := range x.deleting {
		out = append(out, x.byName[name])
	}
	slices.SortFunc(out, func(a, b namedCIDR) int { return strings.Compare(a.name, b.name) })
	return out
}
