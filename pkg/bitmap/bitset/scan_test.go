package bitset

import (
	"fmt"
	"testing"
)

// TestNextDynamicFillsEverything fills bitmaps of many shapes with
// NextDynamic+Set: every pick is new and in range, the whole upper band is
// taken before the first lower-band slot, and in the end every slot is used.
func TestNextDynamicFillsEverything(t *testing.T) {
	t.Parallel()
	sizes := []int{1, 2, 14, 30, 62, 63, 64, 65, 126, 127, 128, 254, 1000}
	for _, size := range sizes {
		// 0 and 16 are the band splits real ranges use (design.md §3); an
		// all-static bitmap and a partial-word band are the odd cases.
		for _, staticSize := range []int{0, 16, 62, size} {
			if staticSize > size || (staticSize == size && size > 64) {
				continue
			}
			t.Run(fmt.Sprintf("size=%d/static=%d", size, staticSize), func(t *testing.T) {
				b := mustNew(t, size, staticSize)
				b.SetRand(seeded(uint64(size*1000 + staticSize)))
				seen := make(map[int]bool, size)
				firstLower := -1
				for n := 0; ; n++ {
					i, ok := b.NextDynamic()
					if !ok {
						break
					}
					if i < 0 || i >= size || seen[i] {
						t.Fatalf("pick %d = %d: out of range or repeated", n, i)
					}
					if i < staticSize && firstLower < 0 {
						firstLower = n
					}
					if i >= staticSize && firstLower >= 0 {
						t.Fatalf("pick %d = %d in the upper band after the lower band was used at pick %d", n, i, firstLower)
					}
					if !b.Set(i) {
						t.Fatalf("Set(%d) after NextDynamic = false", i)
					}
					seen[i] = true
				}
				if len(seen) != size || b.Used() != size || b.Free() != 0 || b.UsedStatic() != staticSize {
					t.Fatalf("after filling: picked %d, Used=%d Free=%d UsedStatic=%d; want %d, %d, 0, %d",
						len(seen), b.Used(), b.Free(), b.UsedStatic(), size, size, staticSize)
				}
				if upper := size - staticSize; staticSize > 0 && firstLower != upper {
					t.Fatalf("first lower-band pick was #%d, want #%d", firstLower, upper)
				}
				checkInvariants(t, b)
			})
		}
	}
}

// TestNextDynamicSlash25 is the 128-slot, static-16 case spelled out: the
// first 112 picks are distinct slots of [16, 128), the 113th is in [0, 16).
func TestNextDynamicSlash25(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 128, 16)
	b.SetRand(seeded(25))
	seen := map[int]bool{}
	for n := range 112 {
		i, ok := b.NextDynamic()
		if !ok || i < 16 || i >= 128 || seen[i] {
			t.Fatalf("pick %d = %d, %v: want a new slot in [16, 128)", n, i, ok)
		}
		seen[i] = true
		b.Set(i)
	}
	i, ok := b.NextDynamic()
	if !ok || i >= 16 {
		t.Fatalf("pick 113 = %d, %v: want a slot in [0, 16)", i, ok)
	}
}

// TestNextDynamicDoesNotMark checks NextDynamic only reports its pick.
func TestNextDynamicDoesNotMark(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 254, 16)
	for range 10 {
		i, ok := b.NextDynamic()
		if !ok || b.Has(i) {
			t.Fatalf("NextDynamic = %d, %v; Has = %v", i, ok, b.Has(i))
		}
	}
	if b.Used() != 0 {
		t.Fatalf("Used = %d after NextDynamic only", b.Used())
	}
}

// TestNextDynamicSpread checks starts are random: over 200 fresh, empty
// 1000-slot bitmaps the first pick takes many distinct values across the
// whole range. The seed is fixed, so the test is deterministic; a uniform
// source gives about 182 distinct values, a broken one (constant, or only a
// few starts) far fewer.
func TestNextDynamicSpread(t *testing.T) {
	t.Parallel()
	r := seeded(2024)
	picks := map[int]bool{}
	lowest, highest := 1000, -1
	for range 200 {
		b := mustNew(t, 1000, 0)
		b.SetRand(r)
		i, ok := b.NextDynamic()
		if !ok {
			t.Fatal("NextDynamic on an empty bitmap = false")
		}
		picks[i] = true
		lowest, highest = min(lowest, i), max(highest, i)
	}
	if len(picks) < 150 {
		t.Errorf("200 first picks hit %d distinct slots, want at least 150", len(picks))
	}
	if lowest > 50 || highest < 950 {
		t.Errorf("first picks span [%d, %d], want nearly all of [0, 1000)", lowest, highest)
	}
}

// TestNextDynamicUpperBandOnly checks the random start never lands in the
// lower band while the upper band has room, even with one free upper slot.
func TestNextDynamicUpperBandOnly(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 1000, 62)
	b.SetRand(seeded(7))
	for i := 62; i < 1000; i++ {
		if i != 500 {
			b.Set(i)
		}
	}
	for range 100 {
		if i, ok := b.NextDynamic(); !ok || i != 500 {
			t.Fatalf("NextDynamic = %d, %v; want the only free upper slot 500", i, ok)
		}
	}
}

func TestNextFreeIn(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 300, 16)
	for _, i := range []int{0, 1, 2, 100, 101, 299} {
		b.Set(i)
	}
	for i := 128; i < 256; i++ {
		b.Set(i)
	}
	tests := []struct {
		lo, hi, start int
		want          int
		ok            bool
	}{
		{0, 300, 0, 3, true},        // skips the taken prefix
		{0, 300, 100, 102, true},    // start on a taken slot
		{0, 300, 102, 102, true},    // start on a free slot
		{0, 300, 127, 127, true},    // last free slot before the full words
		{0, 300, 128, 256, true},    // skips two full words
		{0, 300, 299, 3, true},      // last slot taken: wraps to lo
		{128, 256, 200, 0, false},   // a full range of whole words
		{100, 102, 101, 0, false},   // a full range inside a word
		{100, 103, 101, 102, true},  // the only free slot
		{128, 257, 130, 256, true},  // the only free slot, at the end
		{120, 256, 130, 120, true},  // wraps to lo
		{126, 130, 128, 126, true},  // wraps across a word boundary
		{0, 16, 0, 3, true},         // the lower band
		{16, 300, 16, 16, true},     // the upper band
		{256, 300, 299, 256, true},  // wraps inside the last partial word
		{298, 300, 299, 298, true},  // wraps by one slot
		{299, 300, 299, 0, false},   // only the last slot, taken
		{256, 257, 256, 256, true},  // a single free slot
		{-10, 2, 0, 0, false},       // lo clipped to 0
		{290, 1000, 299, 290, true}, // hi clipped to size
		{299, 301, 299, 0, false},   // hi clipped; only 299 (taken) is left
		{0, 300, 300, 3, true},      // start == hi: from lo
		{0, 300, -1, 3, true},       // negative start: from lo
		{50, 60, 10, 50, true},      // start below lo: from lo
		{10, 10, 10, 0, false},      // empty range
		{20, 10, 15, 0, false},      // inverted range
		{300, 400, 300, 0, false},   // entirely beyond size
	}
	for _, tt := range tests {
		got, ok := b.NextFreeIn(tt.lo, tt.hi, tt.start)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NextFreeIn(%d, %d, %d) = %d, %v; want %d, %v", tt.lo, tt.hi, tt.start, got, ok, tt.want, tt.ok)
		}
	}
}

// TestNextFreeInMatchesLinearScan compares NextFreeIn with the obvious
// bit-by-bit scan on random fills and random windows.
func TestNextFreeInMatchesLinearScan(t *testing.T) {
	t.Parallel()
	r := seeded(99)
	for _, size := range []int{1, 63, 64, 65, 200, 4097, 70000} {
		for _, fill := range []float64{0, 0.5, 0.97, 0.9999, 1} {
			b := mustNew(t, size, 0)
			for i := range size {
				if r.Float64() < fill {
					b.Set(i)
				}
			}
			for range 200 {
				lo, hi := r.IntN(size+1), r.IntN(size+1)
				start := lo + r.IntN(max(hi-lo, 1))
				want, wantOK := -1, false
				for k := 0; lo < hi && k < hi-lo && !wantOK; k++ {
					i := lo + (start-lo+k)%(hi-lo)
					if !b.Has(i) {
						want, wantOK = i, true
					}
				}
				got, ok := b.NextFreeIn(lo, hi, start)
				if ok != wantOK || (ok && got != want) {
					t.Fatalf("size %d fill %v: NextFreeIn(%d, %d, %d) = %d, %v; linear scan gives %d, %v",
						size, fill, lo, hi, start, got, ok, want, wantOK)
				}
			}
		}
	}
}

// TestNextDynamicAllocs is not parallel: testing.AllocsPerRun refuses to run
// in a parallel test.
func TestNextDynamicAllocs(t *testing.T) {
	b := mustNew(t, 1048574, 256)
	r := seeded(1)
	for i := range b.Size() {
		if r.IntN(100) < 99 {
			b.Set(i)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		i, ok := b.NextDynamic()
		if !ok {
			t.Fatal("NextDynamic = false")
		}
		b.Set(i)
		b.Clear(i)
	})
	if allocs != 0 {
		t.Errorf("NextDynamic+Set+Clear allocates %v times per call, want 0", allocs)
	}
}
