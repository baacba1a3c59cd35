package clusterip

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/subrange"
)

// Allocator is an in-memory, IP-level allocator over one range: the bitmap of
// design.md §6 without persistence. It implements allocation.Interface (the
// context and owner are not needed in memory) and is safe for concurrent use.
type Allocator struct {
	rng subrange.Range

	mu   sync.Mutex
	bits *bitset.Set // guarded by mu
}

var _ allocation.Interface = (*Allocator)(nil)

// NewAllocator returns an empty allocator over r.
func NewAllocator(r subrange.Range) (*Allocator, error) {
	bits, err := newRangeBitmap(r)
	if err != nil {
		return nil, err
	}
	return &Allocator{rng: r, bits: bits}, nil
}

func newRangeBitmap(r subrange.Range) (*bitset.Set, error) {
	if r.Size() > bitmap.MaxSlots {
		return nil, fmt.Errorf("range %s has %d addresses, more than the %d a bitmap holds", r.Prefix(), r.Size(), bitmap.MaxSlots)
	}
	return bitset.New(int(r.Size()), int(r.StaticSize()))
}

// Range is the usable range the allocator serves.
func (a *Allocator) Range() subrange.Range { return a.rng }

// IPv6 reports whether the allocator serves IPv6.
func (a *Allocator) IPv6() bool { return a.rng.IPv6() }

// Allocate reserves ip.
func (a *Allocator) Allocate(_ context.Context, ip netip.Addr, _ allocation.Owner) error {
	i, err := indexOf(a.rng, ip)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.bits.Set(i) {
		return allocation.ErrAllocated
	}
	return nil
}

// AllocateNext reserves a free address, upper band first.
func (a *Allocator) AllocateNext(_ context.Context, _ allocation.Owner) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.bits.NextDynamic()
	if !ok {
		return netip.Addr{}, fullError(a.rng)
	}
	a.bits.Set(i)
	return addrOf(a.rng, i), nil
}

// Release frees ip; it is a no-op when ip is not allocated or out of range.
func (a *Allocator) Release(_ context.Context, ip netip.Addr, _ allocation.Owner) error {
	i, ok := a.rng.Index(ip)
	if !ok {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bits.Clear(int(i))
	return nil
}

// Has reports whether ip is allocated.
func (a *Allocator) Has(_ context.Context, ip netip.Addr) (bool, error) {
	i, ok := a.rng.Index(ip)
	if !ok {
		return false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bits.Has(int(i)), nil
}

// ForEach calls fn for every allocated address in ascending order, on a copy
// taken under the lock so fn may call back into the allocator.
func (a *Allocator) ForEach(_ context.Context, fn func(netip.Addr)) error {
	a.mu.Lock()
	snapshot := a.bits.Clone()
	a.mu.Unlock()
	snapshot.ForEach(func(i int) { fn(addrOf(a.rng, i)) })
	return nil
}

// Usage reports the fill level.
func (a *Allocator) Usage(context.Context) (allocation.Usage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return bitmap.UsageOf(a.bits), nil
}

// Used is the number of allocated addresses.
func (a *Allocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bits.Used()
}

// Free is the number of usable addresses not allocated.
func (a *Allocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bits.Free()
}

// Snapshot returns the allocator's state as a RangeAllocation's range and data.
func (a *Allocator) Snapshot() (rangeSpec string, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rng.Prefix().String(), a.bits.Bytes()
}

// Restore replaces the allocator's state with a RangeAllocation's range and
// data. A snapshot of another range fails with allocation.ErrMismatchedNetwork,
// data marking addresses beyond the range with a *DataBeyondRangeError; on
// error nothing changes.
func (a *Allocator) Restore(rangeSpec string, data []byte) error {
	if err := checkRangeSpec(a.rng, rangeSpec); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bits.SetBytes(data)
}

// DryRun returns a view that checks and answers but never changes anything.
func (a *Allocator) DryRun() allocation.Interface { return dryRun{a} }

// Read calls fn with the bit set under the allocator's lock; fn must not
// keep it.
func (a *Allocator) Read(_ context.Context, fn func(*bitset.Set)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a.bits)
	return nil
}

// indexOf maps ip to its slot, or returns the typed not-in-range error.
func indexOf(r subrange.Range, ip netip.Addr) (int, error) {
	i, ok := r.Index(ip)
	if !ok {
		return 0, &allocation.NotInRangeError{IP: ip, ValidRange: r.Prefix().String()}
	}
	return int(i), nil
}

// addrOf maps a slot back to its address; the slot is always in range.
func addrOf(r subrange.Range, i int) netip.Addr {
	addr, _ := r.Addr(uint64(i))
	return addr
}

// checkRangeSpec compares a stored RangeAllocation range with r.
func checkRangeSpec(r subrange.Range, rangeSpec string) error {
	stored, err := netip.ParsePrefix(rangeSpec)
	if err != nil || stored != r.Prefix() {
		return fmt.Errorf("restore %q into %s: %w", rangeSpec, r.Prefix(), allocation.ErrMismatchedNetwork)
	}
	return nil
}

// fullError is ErrFull for r, with the operator's hint: the bitmap model
// serves one range per family, so room comes from deleting Services or from
// the IPAddress model's ServiceCIDRs.
func fullError(r subrange.Range) error {
	family := "IPv4"
	if r.IPv6() {
		family = "IPv6"
	}
	return allocation.NewFullError(fmt.Sprintf("the %s service IP range %s (--service-cluster-ip-range) has no free address, and the bitmap model "+
		"serves one range per family: delete Services no longer needed, or move to the IPAddress model (allocator migrate --to ipaddress) "+
		"and add a ServiceCIDR; `kubectl allocator status` shows how full each range is", family, r.Prefix()))
}
