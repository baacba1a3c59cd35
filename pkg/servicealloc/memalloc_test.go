package servicealloc

import (
	"context"
	"net/netip"
	"sync"

	"github.com/allocator/allocator/pkg/allocation"
)

// memAllocator is a minimal allocation.Interface over a prefix for tests:
// sequential AllocateNext, no bands.
type memAllocator struct {
	prefix   netip.Prefix
	mu       sync.Mutex
	used     map[netip.Addr]bool // guarded by mu
	notReady bool
	dry      bool
}

func newMem(prefix string) *memAllocator {
	return &memAllocator{prefix: netip.MustParsePrefix(prefix), used: map[netip.Addr]bool{}}
}

// usable follows design.md §3: never the network address, never the IPv4
// broadcast address (accepting a /30's broadcast address would make tests
// here check behaviour upstream does not have).
func (m *memAllocator) usable(ip netip.Addr) bool {
	return m.prefix.Contains(ip) && ip != m.prefix.Addr() && !(ip.Is4() && ip == lastOf(m.prefix))
}

// lastOf is the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}

func (m *memAllocator) Allocate(_ context.Context, ip netip.Addr, _ allocation.Owner) error {
	if m.notReady {
		return allocation.ErrNotReady
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.usable(ip) {
		return &allocation.NotInRangeError{IP: ip, ValidRange: m.prefix.String()}
	}
	if m.used[ip] {
		return allocation.ErrAllocated
	}
	if !m.dry {
		m.used[ip] = true
	}
	return nil
}

func (m *memAllocator) AllocateNext(_ context.Context, _ allocation.Owner) (netip.Addr, error) {
	if m.notReady {
		return netip.Addr{}, allocation.ErrNotReady
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ip := m.prefix.Addr().Next(); m.prefix.Contains(ip); ip = ip.Next() {
		if m.usable(ip) && !m.used[ip] {
			if !m.dry {
				m.used[ip] = true
			}
			return ip, nil
		}
	}
	return netip.Addr{}, allocation.ErrFull
}

func (m *memAllocator) Release(_ context.Context, ip netip.Addr, _ allocation.Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dry {
		delete(m.used, ip)
	}
	return nil
}

func (m *memAllocator) Has(_ context.Context, ip netip.Addr) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used[ip], nil
}

func (m *memAllocator) ForEach(_ context.Context, fn func(netip.Addr)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ip := range m.used {
		fn(ip)
	}
	return nil
}

func (m *memAllocator) Usage(context.Context) (allocation.Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return allocation.Usage{Used: uint64(len(m.used))}, nil
}

func (m *memAllocator) IPv6() bool { return m.prefix.Addr().Is6() }

func (m *memAllocator) DryRun() allocation.Interface {
	return &dryMem{m}
}

// dryMem shares the state of a memAllocator but never changes it.
type dryMem struct{ *memAllocator }

func (d *dryMem) Allocate(ctx context.Context, ip netip.Addr, o allocation.Owner) error {
	if d.notReady {
		return allocation.ErrNotReady
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.usable(ip) {
		return &allocation.NotInRangeError{IP: ip, ValidRange: d.prefix.String()}
	}
	if d.used[ip] {
		return allocation.ErrAllocated
	}
	return nil
}

func (d *dryMem) AllocateNext(context.Context, allocation.Owner) (netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ip := d.prefix.Addr().Next(); d.prefix.Contains(ip); ip = ip.Next() {
		if d.usable(ip) && !d.used[ip] {
			return ip, nil
		}
	}
	return netip.Addr{}, allocation.ErrFull
}

func (d *dryMem) Release(context.Context, netip.Addr, allocation.Owner) error { return nil }
