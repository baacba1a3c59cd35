package bitset

import (
	"fmt"
	"testing"
)

// slash12 is the number of usable slots of an IPv4 /12, the widest range the
// bitmap model accepts, and slash12Static its lower band (design.md §3).
const (
	slash12       = 1<<20 - 2
	slash12Static = 256
)

// filledSlash12 returns a /12 bitmap with each slot set with probability
// fill, from a fixed seed so every run measures the same layout.
func filledSlash12(b *testing.B, fill float64) *Set {
	b.Helper()
	bm := mustNew(b, slash12, slash12Static)
	r := seeded(12)
	for i := range slash12 {
		if r.Float64() < fill {
			bm.Set(i)
		}
	}
	bm.SetRand(seeded(13))
	return bm
}

// BenchmarkAllocateNext measures one dynamic allocation (NextDynamic+Set) and
// its release, so the fill level stays constant across iterations.
func BenchmarkAllocateNext(b *testing.B) {
	for _, fill := range []float64{0, 0.5, 0.99, 0.9999} {
		b.Run(fmt.Sprintf("fill=%v%%", fill*100), func(b *testing.B) {
			bm := filledSlash12(b, fill)
			b.ReportAllocs()
			for b.Loop() {
				i, ok := bm.NextDynamic()
				if !ok {
					b.Fatal("NextDynamic = false")
				}
				bm.Set(i)
				bm.Clear(i)
			}
			b.ReportMetric(float64(bm.Free()), "free")
		})
	}
}

func BenchmarkBytes(b *testing.B) {
	bm := filledSlash12(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		if len(bm.Bytes()) != slash12/8+1 {
			b.Fatal("short Bytes")
		}
	}
}

func BenchmarkSetBytes(b *testing.B) {
	data := filledSlash12(b, 1).Bytes()
	bm := mustNew(b, slash12, slash12Static)
	b.ReportAllocs()
	for b.Loop() {
		if err := bm.SetBytes(data); err != nil {
			b.Fatal(err)
		}
	}
}
