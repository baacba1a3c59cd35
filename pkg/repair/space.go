package repair

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/subrange"
)

// Key is what a RangeAllocation allocates: a ClusterIP or a node port.
type Key interface{ netip.Addr | int }

// Space maps the keys of one range (AddrSpace, PortSpace) to the slots of
// its map.
type Space[K Key] interface {
	// Slots is the number of slots and StaticSlots the lower (static) band.
	Slots() int
	StaticSlots() int
	// Index is k's slot, false when k is outside the range.
	Index(k K) (int, bool)
	// Key is the key of slot i, 0 ≤ i < Slots().
	Key(i int) K
	// String names the range in errors.
	String() string
}

// AddrSpace is a ClusterIP range as a Space: slot i is the address
// network+1+i.
type AddrSpace struct{ Range subrange.Range }

func (s AddrSpace) Slots() int       { return int(s.Range.Size()) }
func (s AddrSpace) StaticSlots() int { return int(s.Range.StaticSize()) }
func (s AddrSpace) String() string   { return s.Range.Prefix().String() }

func (s AddrSpace) Index(ip netip.Addr) (int, bool) {
	i, ok := s.Range.Index(ip)
	return int(i), ok
}

func (s AddrSpace) Key(i int) netip.Addr {
	ip, _ := s.Range.Addr(uint64(i)) // the core asks only for slots of the range
	return ip
}

// PortSpace is a node-port range as a Space: slot i is the port base+i.
type PortSpace struct{ nodeport.Range }

func (s PortSpace) Key(i int) int {
	port, _ := s.Port(i) // the core asks only for slots of the range
	return port
}

// holds reports whether svc, read again, holds k (internal/holding: the one
// answer the allocator's release and every repair share).
func holds[K Key](svc *corev1.Service, k K) bool {
	switch k := any(k).(type) {
	case netip.Addr:
		return holding.HoldsIP(svc, k)
	case int:
		return holding.HoldsNodePort(svc, k)
	}
	return false
}
