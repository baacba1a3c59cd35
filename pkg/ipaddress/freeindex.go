package ipaddress

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/subrange"
)

// MaxBitmapSize is the largest range, in usable addresses, that a FreeIndex
// tracks with a bitmap (128 KiB of bits plus summaries). Larger ranges use
// random probing against a hashed set of used offsets, whose memory grows
// with the number of used addresses rather than with the range.
const MaxBitmapSize = 1 << 20

// randomProbes is how many uniformly random offsets a sparse index tries
// before it walks forward from a random start. At fill f the chance that all
// probes hit used offsets is f^64: 1e-3 at 90% fill, so the walk is the rare
// path; it still terminates because a free offset lies within used+1 steps.
const randomProbes = 64

// FreeIndex is the set of used addresses of one ServiceCIDR's usable range
// and picks free ones following the band rules of design.md §3: dynamic picks
// take a random start in the upper band and scan with wrap-around, and only
// when the upper band is full fall back to the lower (static) band.
//
// Addresses are stored as offsets from Range.First and turned back into
// addresses only through subrange.Range.Addr, whose 128-bit arithmetic cannot
// leave the prefix: an address outside the range can never be returned.
//
// A FreeIndex is not safe for concurrent use: its owner locks.
type FreeIndex struct {
	rng  subrange.Range
	used offsets
}

// offsets is one of the two representations of the used set.
type offsets interface {
	set(i uint64) bool
	clear(i uint64) bool
	has(i uint64) bool
	count() uint64
	countStatic() uint64
	next() (uint64, bool)
	// nextOutside is next passing over the holes (holes.go).
	nextOutside(h holes) (uint64, bool)
}

// NewFreeIndex returns an empty index over rng.
func NewFreeIndex(rng subrange.Range) (*FreeIndex, error) {
	if rng.Size() <= MaxBitmapSize {
		bm, err := bitset.New(int(rng.Size()), int(rng.StaticSize()))
		if err != nil {
			return nil, fmt.Errorf("free index for %s: %w", rng, err)
		}
		return &FreeIndex{rng: rng, used: denseOffsets{bm}}, nil
	}
	return &FreeIndex{rng: rng, used: newSparseOffsets(rng.Size(), rng.StaticSize())}, nil
}

// Range returns the usable range the index covers.
func (x *FreeIndex) Range() subrange.Range { return x.rng }

// Set marks addr used. It reports whether addr is in the range and was free.
func (x *FreeIndex) Set(addr netip.Addr) bool {
	i, ok := x.rng.Index(addr)
	return ok && x.used.set(i)
}

// Clear marks addr free. It reports whether addr is in the range and was used.
func (x *FreeIndex) Clear(addr netip.Addr) bool {
	i, ok := x.rng.Index(addr)
	return ok && x.used.clear(i)
}

// Has reports whether addr is in the range and used.
func (x *FreeIndex) Has(addr netip.Addr) bool {
	i, ok := x.rng.Index(addr)
	return ok && x.used.has(i)
}

// Used is the number of used addresses.
func (x *FreeIndex) Used() uint64 { return x.used.count() }

// UsedStatic is the number of used addresses in the lower (static) band.
func (x *FreeIndex) UsedStatic() uint64 { return x.used.countStatic() }

// Free is the number of free usable addresses.
func (x *FreeIndex) Free() uint64 { return x.rng.Size() - x.used.count() }

// Next returns the free address a dynamic allocation would take, without
// marking it, or false when the range is full.
func (x *FreeIndex) Next() (netip.Addr, bool) {
	i, ok := x.used.next()
	if !ok {
		return netip.Addr{}, false
	}
	return x.rng.Addr(i)
}

// denseOffsets is a bitset.Set: word-at-a-time search with summary levels,
// O(1) per pick whatever the fill.
type denseOffsets struct{ bm *bitset.Set }

func (d denseOffsets) set(i uint64) bool    { return d.bm.Set(int(i)) }
func (d denseOffsets) clear(i uint64) bool  { return d.bm.Clear(int(i)) }
func (d denseOffsets) has(i uint64) bool    { return d.bm.Has(int(i)) }
func (d denseOffsets) count() uint64        { return uint64(d.bm.Used()) }
func (d denseOffsets) countStatic() uint64  { return uint64(d.bm.UsedStatic()) }
func (d denseOffsets) next() (uint64, bool) { i, ok := d.bm.NextDynamic(); return uint64(i), ok }

// sparseOffsets is a hashed set of used offsets for ranges too large for a
// bitmap (an IPv6 /64 has 2^64-1 usable addresses). Its memory is
// proportional to the used addresses.
type sparseOffsets struct {
	size, static uint64
	used         map[uint64]struct{}
	usedStatic   uint64
	rand         *rand.Rand
}

func newSparseOffsets(size, static uint64) *sparseOffsets {
	return &sparseOffsets{
		size: size, static: static,
		used: make(map[uint64]struct{}),
		rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
}

func (s *sparseOffsets) set(i uint64) bool {
	if i >= s.size {
		return false
	}
	if _, ok := s.used[i]; ok {
		return false
	}
	s.used[i] = struct{}{}
	if i < s.static {
		s.usedStatic++
	}
	return true
}

func (s *sparseOffsets) clear(i uint64) bool {
	if _, ok := s.used[i]; !ok {
		return false
	}
	delete(s.used, i)
	if i < s.static {
		s.usedStatic--
	}
	return true
}

func (s *sparseOffsets) has(i uint64) bool { _, ok := s.used[i]; return ok }
func (s *sparseOffsets) count() uint64     { return uint64(len(s.used)) }
func (s *sparseOffsets) countStatic() uint64 {
	return s.usedStatic
}

func (s *sparseOffsets) next() (uint64, bool) {
	if uint64(len(s.used)) >= s.size {
		return 0, false
	}
	if s.size-s.static > uint64(len(s.used))-s.usedStatic {
		return s.pick(s.static, s.size), true
	}
	return s.pick(0, s.static), true
}

// pick returns a free offset in [lo, hi), which must have one: random probes
// first, then a forward walk with wrap-around from a random start.
func (s *sparseOffsets) pick(lo, hi uint64) uint64 {
	n := hi - lo
	for range randomProbes {
		i := lo + s.rand.Uint64N(n)
		if _, ok := s.used[i]; !ok {
			return i
		}
	}
	i := lo + s.rand.Uint64N(n)
	for {
		if _, ok := s.used[i]; !ok {
			return i
		}
		if i++; i == hi {
			i = lo
		}
	}
}
