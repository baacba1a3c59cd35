package bitset

import (
	"math/bits"
	"math/rand/v2"
)

// SetRand replaces the random source used by NextDynamic, for deterministic
// tests. A nil r restores a freshly seeded source.
func (b *Set) SetRand(r *rand.Rand) {
	if r == nil {
		r = newRand()
	}
	b.rand = r
}

// NextDynamic returns the slot a dynamic allocation would take, without
// marking it, or false when every slot is set.
//
// The strategy is upstream kube-apiserver's (KEP-3070): a uniformly random
// start in the upper band, a forward scan to the end of the band, wrapping to
// its beginning; only when the upper band is full, the lower band the same
// way, from a random start of its own. Random starts keep concurrent replicas
// from racing for the same slot, and keep the fallback from taking the
// well-known low addresses (.1, .10) first; the lower band stays free for
// user-chosen addresses as long as possible.
func (b *Set) NextDynamic() (int, bool) {
	if b.used >= b.size {
		return 0, false
	}
	upper := b.size - b.staticSize
	if upper > b.used-b.usedStatic {
		start := b.staticSize + b.rand.IntN(upper)
		return b.NextFreeIn(b.staticSize, b.size, start)
	}
	return b.NextFreeIn(0, b.staticSize, b.rand.IntN(b.staticSize))
}

// NextFreeIn returns the first free slot in [lo, hi), scanning [start, hi)
// first and then wrapping around to [lo, start). lo and hi are clipped to the
// bitmap; a start outside [lo, hi) scans from lo. It reports false when
// [lo, hi) has no free slot.
func (b *Set) NextFreeIn(lo, hi, start int) (int, bool) {
	lo, hi = max(lo, 0), min(hi, b.size)
	if lo >= hi {
		return 0, false
	}
	if start < lo || start >= hi {
		start = lo
	}
	if i := b.nextClear(start); i >= 0 && i < hi {
		return i, true
	}
	if start > lo {
		if i := b.nextClear(lo); i >= 0 && i < start {
			return i, true
		}
	}
	return 0, false
}

// nextClear returns the first free slot at or after from, or -1 if there is
// none. It climbs the summary levels until a word has a non-full entry at or
// after the current position, then descends taking the lowest non-full entry
// at each level, so the cost is a few word operations per level whatever the
// fill: never a bit-by-bit scan.
func (b *Set) nextClear(from int) int {
	if from >= b.size {
		return -1
	}
	top := len(b.levels) - 1
	k, pos := 0, from
	for {
		level := b.levels[k]
		w := pos >> 6
		if w >= len(level) {
			return -1
		}
		free := ^level[w] & (^uint64(0) << (uint(pos) & 63))
		if w == len(level)-1 {
			free &= b.lastMask[k]
		}
		if free != 0 {
			pos = w<<6 | bits.TrailingZeros64(free)
			break
		}
		if k == top {
			return -1
		}
		// Everything at or after pos in this word is full: continue with the
		// next word, which is the next entry one level up.
		k, pos = k+1, w+1
	}
	for k > 0 {
		k--
		// The summary bit is clear, so this word has a free valid position.
		free := ^b.levels[k][pos]
		if pos == len(b.levels[k])-1 {
			free &= b.lastMask[k]
		}
		pos = pos<<6 | bits.TrailingZeros64(free)
	}
	return pos
}
