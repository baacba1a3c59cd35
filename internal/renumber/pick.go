package renumber

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// Picker chooses free addresses of the --to ServiceCIDR for static
// requests: per family, its CIDR's usable addresses from the start of the
// dynamic (upper) band on, wrapping into the static band, skipping the ones
// known taken. The API decides in the end: a create refused because another
// client took the address meanwhile marks it taken and asks again. Safe for
// concurrent use.
type Picker struct {
	ranges map[bool]subrange.Range // by family (true: IPv6); not written after NewPicker

	mu    sync.Mutex      // guards next and taken
	next  map[bool]uint64 // index of the next candidate
	taken map[netip.Addr]bool
}

// NewPicker returns a Picker over cidrs (one per family at most) that skips
// taken.
func NewPicker(cidrs []string, taken []netip.Addr) (*Picker, error) {
	p := &Picker{ranges: map[bool]subrange.Range{}, next: map[bool]uint64{}, taken: map[netip.Addr]bool{}}
	for _, text := range cidrs {
		prefix, err := netip.ParsePrefix(text)
		if err != nil {
			return nil, fmt.Errorf("--to CIDR %q: %w", text, err)
		}
		r, err := subrange.New(prefix, model.IPAddress)
		if err != nil {
			return nil, fmt.Errorf("--to CIDR %s: %w", prefix, err)
		}
		v6 := prefix.Addr().Is6()
		if _, dup := p.ranges[v6]; !dup {
			p.ranges[v6] = r
			p.next[v6] = r.StaticSize() % max(r.Size(), 1)
		}
	}
	for _, ip := range taken {
		p.taken[ip] = true
	}
	return p, nil
}

// Has reports whether the Picker has a CIDR of the family.
func (p *Picker) Has(v6 bool) bool {
	_, ok := p.ranges[v6]
	return ok
}

// Range returns the Picker's range of the family.
func (p *Picker) Range(v6 bool) (subrange.Range, bool) {
	r, ok := p.ranges[v6] // written by NewPicker only
	return r, ok
}

// Next returns a free address of the family's CIDR and counts it taken, or
// false when every address is taken (or the family has no CIDR). It looks
// at most at every address once per call.
func (p *Picker) Next(v6 bool) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.ranges[v6]
	if !ok || r.Size() == 0 {
		return netip.Addr{}, false
	}
	// Bounded by the taken count: a range larger than it has a free address
	// within len(taken)+1 steps.
	steps := min(r.Size(), uint64(len(p.taken))+1)
	for range steps {
		i := p.next[v6]
		p.next[v6] = (i + 1) % r.Size()
		addr, _ := r.Addr(i)
		if !p.taken[addr] {
			p.taken[addr] = true
			return addr, true
		}
	}
	return netip.Addr{}, false
}

// Taken marks addr taken (a create found it allocated).
func (p *Picker) Taken(addr netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.taken[addr] = true
}
