package bitset

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// ErrInvalidSize is wrapped by the errors New returns for a negative size or a
// static band that does not fit in the range.
var ErrInvalidSize = errors.New("invalid bitmap size")

// Set is a fixed set of slots 0..Size()-1. Slots [0, StaticSize()) are the
// lower (static) band, [StaticSize(), Size()) the upper (dynamic) band.
//
// A Set is not safe for concurrent use: its owner serialises access.
type Set struct {
	size       int
	staticSize int
	used       int
	usedStatic int

	// levels[0] holds one bit per slot. levels[k] (k > 0) holds one bit per
	// word of levels[k-1], set exactly when that word is full. The last level
	// has at most one word. Padding bits past the end of a level are never set.
	levels [][]uint64
	// lastMask[k] has a bit set for every valid position of the last word of
	// levels[k]; all other words of the level are valid in all 64 positions.
	lastMask []uint64

	rand *rand.Rand
}

// New returns an empty bitmap of size slots whose first staticSize slots are
// the lower (static) band.
func New(size, staticSize int) (*Set, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: size %d is negative", ErrInvalidSize, size)
	}
	if staticSize < 0 || staticSize > size {
		return nil, fmt.Errorf("%w: static band size %d is not within [0, %d]", ErrInvalidSize, staticSize, size)
	}
	b := &Set{size: size, staticSize: staticSize, rand: newRand()}
	// Build the levels bottom-up until one word summarises everything; a
	// 2^20-slot bitmap has four levels (16384, 256, 4 and 1 words).
	n := size
	for {
		words := (n + 63) / 64
		b.levels = append(b.levels, make([]uint64, words))
		b.lastMask = append(b.lastMask, lowMask(n))
		if words <= 1 {
			break
		}
		n = words
	}
	return b, nil
}

// lowMask returns the valid-bit mask of the last word of a level of n bits.
func lowMask(n int) uint64 {
	if r := n % 64; r != 0 {
		return uint64(1)<<r - 1
	}
	return ^uint64(0)
}

// newRand returns a generator with a random seed, so that replicas starting at
// the same time do not pick the same sequence of slots.
func newRand() *rand.Rand {
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// Size returns the number of slots.
func (b *Set) Size() int { return b.size }

// StaticSize returns the number of slots in the lower (static) band.
func (b *Set) StaticSize() int { return b.staticSize }

// Used returns the number of set slots.
func (b *Set) Used() int { return b.used }

// UsedStatic returns the number of set slots in the lower (static) band.
func (b *Set) UsedStatic() int { return b.usedStatic }

// Free returns the number of free slots.
func (b *Set) Free() int { return b.size - b.used }

// Has reports whether slot i is set; it is false when i is out of range.
func (b *Set) Has(i int) bool {
	if uint(i) >= uint(b.size) {
		return false
	}
	return b.levels[0][i>>6]&(1<<(uint(i)&63)) != 0
}

// Set marks slot i. It returns false if i was already set or is out of range.
func (b *Set) Set(i int) bool {
	if uint(i) >= uint(b.size) {
		return false
	}
	pos := i
	for k := range b.levels {
		w, bit := pos>>6, uint64(1)<<(uint(pos)&63)
		word := b.levels[k][w]
		if word&bit != 0 {
			// Only possible at level 0: a parent bit is set only when it
			// becomes full, which we are doing right now.
			return false
		}
		word |= bit
		b.levels[k][w] = word
		if word != b.fullWord(k, w) {
			break
		}
		pos = w
	}
	b.used++
	if i < b.staticSize {
		b.usedStatic++
	}
	return true
}

// Clear frees slot i. It returns false if i was not set or is out of range.
func (b *Set) Clear(i int) bool {
	if uint(i) >= uint(b.size) {
		return false
	}
	pos := i
	for k := range b.levels {
		w, bit := pos>>6, uint64(1)<<(uint(pos)&63)
		word := b.levels[k][w]
		if word&bit == 0 {
			return false // only possible at level 0, see Set
		}
		wasFull := word == b.fullWord(k, w)
		b.levels[k][w] = word &^ bit
		if !wasFull {
			break
		}
		pos = w
	}
	b.used--
	if i < b.staticSize {
		b.usedStatic--
	}
	return true
}

// fullWord returns the value word w of level k has when it is full.
func (b *Set) fullWord(k, w int) uint64 {
	if w == len(b.levels[k])-1 {
		return b.lastMask[k]
	}
	return ^uint64(0)
}

// ForEach calls fn for every set slot in ascending order. fn must not modify
// the bitmap.
func (b *Set) ForEach(fn func(i int)) {
	for w, word := range b.levels[0] {
		for word != 0 {
			fn(w<<6 | bits.TrailingZeros64(word))
			word &= word - 1
		}
	}
}

// Clone returns a deep copy. The copy gets its own, freshly seeded random
// source so that the two can be used independently.
func (b *Set) Clone() *Set {
	c := *b
	c.levels = make([][]uint64, len(b.levels))
	for k, level := range b.levels {
		c.levels[k] = append([]uint64(nil), level...)
	}
	c.lastMask = append([]uint64(nil), b.lastMask...)
	c.rand = newRand()
	return &c
}

// Reset frees every slot.
func (b *Set) Reset() {
	for _, level := range b.levels {
		clear(level)
	}
	b.used, b.usedStatic = 0, 0
}

// recount recomputes the summary levels and the counters from levels[0].
func (b *Set) recount() {
	words := b.levels[0]
	b.used = 0
	for _, word := range words {
		b.used += bits.OnesCount64(word)
	}
	b.usedStatic = 0
	full, rest := b.staticSize/64, b.staticSize%64
	for _, word := range words[:full] {
		b.usedStatic += bits.OnesCount64(word)
	}
	if rest != 0 {
		b.usedStatic += bits.OnesCount64(words[full] & (uint64(1)<<rest - 1))
	}
	for k := 1; k < len(b.levels); k++ {
		parent := b.levels[k]
		clear(parent)
		for w, word := range b.levels[k-1] {
			if word == b.fullWord(k-1, w) {
				parent[w>>6] |= 1 << (uint(w) & 63)
			}
		}
	}
}
