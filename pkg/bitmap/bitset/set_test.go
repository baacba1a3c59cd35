package bitset

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// mustNew is New for sizes the test knows to be valid.
func mustNew(t testing.TB, size, staticSize int) *Set {
	t.Helper()
	b, err := New(size, staticSize)
	if err != nil {
		t.Fatalf("New(%d, %d): %v", size, staticSize, err)
	}
	return b
}

// seeded returns a deterministic random source for tests.
func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// checkInvariants verifies every invariant doc.go states by recomputing it
// from scratch, independently of the incremental bookkeeping.
func checkInvariants(t testing.TB, b *Set) {
	t.Helper()
	words := b.levels[0]
	if want := (b.size + 63) / 64; len(words) != want {
		t.Fatalf("level 0 has %d words, want %d", len(words), want)
	}
	used, usedStatic := 0, 0
	for i := range len(words) * 64 {
		if words[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		if i >= b.size {
			t.Fatalf("bit %d set beyond size %d", i, b.size)
		}
		used++
		if i < b.staticSize {
			usedStatic++
		}
	}
	if b.used != used || b.usedStatic != usedStatic {
		t.Fatalf("counters used=%d usedStatic=%d, recount gives %d and %d", b.used, b.usedStatic, used, usedStatic)
	}
	for k := 1; k < len(b.levels); k++ {
		n := len(b.levels[k-1])
		parent := b.levels[k]
		if want := (n + 63) / 64; len(parent) != want {
			t.Fatalf("level %d has %d words, want %d", k, len(parent), want)
		}
		for w := range len(parent) * 64 {
			got := parent[w/64]&(1<<(w%64)) != 0
			want := false
			if w < n {
				child := b.levels[k-1][w]
				fullMask := ^uint64(0)
				if w == n-1 {
					fullMask = b.lastMask[k-1]
				}
				want = child == fullMask
			}
			if got != want {
				t.Fatalf("level %d bit %d = %v, want %v (word full)", k, w, got, want)
			}
		}
	}
	if top := b.levels[len(b.levels)-1]; len(top) > 1 {
		t.Fatalf("top level has %d words, want at most 1", len(top))
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		size, staticSize int
		wantErr          bool
	}{
		{"empty", 0, 0, false},
		{"one slot", 1, 0, false},
		{"all static", 14, 14, false},
		{"slash 24", 254, 16, false},
		{"slash 12", 1048574, 256, false},
		{"negative size", -1, 0, true},
		{"negative static", 10, -1, true},
		{"static beyond size", 10, 11, true},
		{"static on empty", 0, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.size, tt.staticSize)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidSize) {
					t.Fatalf("New(%d, %d) error = %v, want ErrInvalidSize", tt.size, tt.staticSize, err)
				}
				if b != nil {
					t.Fatalf("New(%d, %d) returned a bitmap with an error", tt.size, tt.staticSize)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%d, %d): %v", tt.size, tt.staticSize, err)
			}
			got := []int{b.Size(), b.StaticSize(), b.Used(), b.UsedStatic(), b.Free()}
			if diff := cmp.Diff([]int{tt.size, tt.staticSize, 0, 0, tt.size}, got); diff != "" {
				t.Errorf("Size, StaticSize, Used, UsedStatic, Free (-want +got):\n%s", diff)
			}
			checkInvariants(t, b)
		})
	}
}

func TestNewErrorText(t *testing.T) {
	t.Parallel()
	_, err := New(10, 11)
	if want := "invalid bitmap size: static band size 11 is not within [0, 10]"; err == nil || err.Error() != want {
		t.Errorf("New(10, 11) error = %v, want %q", err, want)
	}
	_, err = New(-3, 0)
	if want := "invalid bitmap size: size -3 is negative"; err == nil || err.Error() != want {
		t.Errorf("New(-3, 0) error = %v, want %q", err, want)
	}
}

func TestSetClearHasEdges(t *testing.T) {
	t.Parallel()
	const size = 100
	tests := []struct {
		slot    int
		inRange bool
	}{
		{0, true}, {1, true}, {15, true}, {16, true}, {63, true}, {64, true},
		{size - 1, true}, {size, false}, {size + 1, false}, {-1, false}, {-64, false},
	}
	for _, tt := range tests {
		b := mustNew(t, size, 16)
		if b.Has(tt.slot) {
			t.Errorf("Has(%d) on an empty bitmap = true", tt.slot)
		}
		if got := b.Clear(tt.slot); got {
			t.Errorf("Clear(%d) on an empty bitmap = true", tt.slot)
		}
		if got := b.Set(tt.slot); got != tt.inRange {
			t.Errorf("first Set(%d) = %v, want %v", tt.slot, got, tt.inRange)
		}
		if got := b.Has(tt.slot); got != tt.inRange {
			t.Errorf("Has(%d) after Set = %v, want %v", tt.slot, got, tt.inRange)
		}
		if got := b.Set(tt.slot); got {
			t.Errorf("second Set(%d) = true", tt.slot)
		}
		wantUsed := 0
		if tt.inRange {
			wantUsed = 1
		}
		if b.Used() != wantUsed || b.Free() != size-wantUsed {
			t.Errorf("after Set(%d): Used=%d Free=%d, want %d and %d", tt.slot, b.Used(), b.Free(), wantUsed, size-wantUsed)
		}
		checkInvariants(t, b)
		if got := b.Clear(tt.slot); got != tt.inRange {
			t.Errorf("first Clear(%d) = %v, want %v", tt.slot, got, tt.inRange)
		}
		if got := b.Clear(tt.slot); got {
			t.Errorf("second Clear(%d) = true", tt.slot)
		}
		if b.Has(tt.slot) || b.Used() != 0 {
			t.Errorf("after Clear(%d): Has=%v Used=%d", tt.slot, b.Has(tt.slot), b.Used())
		}
		checkInvariants(t, b)
	}
}

func TestEmptySet(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 0, 0)
	if b.Set(0) || b.Has(0) || b.Clear(0) {
		t.Error("a zero-size bitmap accepted slot 0")
	}
	if i, ok := b.NextDynamic(); ok {
		t.Errorf("NextDynamic on a zero-size bitmap = %d, true", i)
	}
	if got := b.Bytes(); len(got) != 0 {
		t.Errorf("Bytes = %x, want empty", got)
	}
	checkInvariants(t, b)
}

func TestCountersPerBand(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 254, 16)
	type counts struct{ Used, UsedStatic, Free int }
	get := func() counts { return counts{b.Used(), b.UsedStatic(), b.Free()} }
	steps := []struct {
		name string
		op   func() bool
		ok   bool
		want counts
	}{
		{"set lower first", func() bool { return b.Set(0) }, true, counts{1, 1, 253}},
		{"set lower last", func() bool { return b.Set(15) }, true, counts{2, 2, 252}},
		{"set upper first", func() bool { return b.Set(16) }, true, counts{3, 2, 251}},
		{"set upper last", func() bool { return b.Set(253) }, true, counts{4, 2, 250}},
		{"set taken", func() bool { return b.Set(15) }, false, counts{4, 2, 250}},
		{"set beyond", func() bool { return b.Set(254) }, false, counts{4, 2, 250}},
		{"clear lower", func() bool { return b.Clear(15) }, true, counts{3, 1, 251}},
		{"clear upper", func() bool { return b.Clear(16) }, true, counts{2, 1, 252}},
		{"clear free", func() bool { return b.Clear(16) }, false, counts{2, 1, 252}},
	}
	for _, s := range steps {
		if got := s.op(); got != s.ok {
			t.Errorf("%s: returned %v, want %v", s.name, got, s.ok)
		}
		if diff := cmp.Diff(s.want, get()); diff != "" {
			t.Errorf("%s: counters (-want +got):\n%s", s.name, diff)
		}
		checkInvariants(t, b)
	}
}

// TestSummaryAcrossLevels fills and drains a bitmap big enough for four
// levels, so full-word propagation is exercised at every level.
func TestSummaryAcrossLevels(t *testing.T) {
	t.Parallel()
	const size = 64*64*64 + 70 // four levels, partial last words everywhere
	b := mustNew(t, size, 256)
	if len(b.levels) != 4 {
		t.Fatalf("%d levels, want 4", len(b.levels))
	}
	for i := range size {
		b.Set(i)
	}
	checkInvariants(t, b)
	if top := b.levels[3][0]; top != b.lastMask[3] {
		t.Fatalf("top word of a full bitmap = %b, want %b", top, b.lastMask[3])
	}
	for _, i := range []int{size - 1, 0, 64*64*64 - 1, 64 * 64, 4095} {
		b.Clear(i)
		checkInvariants(t, b)
		if got, ok := b.NextFreeIn(0, size, 0); !ok || got != i {
			t.Fatalf("after Clear(%d), first free = %d, %v", i, got, ok)
		}
		b.Set(i)
	}
	checkInvariants(t, b)
	for i := size - 1; i >= 0; i-- {
		b.Clear(i)
	}
	checkInvariants(t, b)
	if b.Used() != 0 {
		t.Fatalf("Used = %d after clearing everything", b.Used())
	}
}

func TestForEach(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 200, 16)
	want := []int{0, 1, 63, 64, 65, 127, 128, 199}
	for _, i := range []int{199, 64, 0, 128, 1, 65, 127, 63} {
		b.Set(i)
	}
	var got []int
	b.ForEach(func(i int) { got = append(got, i) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ForEach (-want +got):\n%s", diff)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 130, 16)
	b.Set(3)
	b.Set(100)
	c := b.Clone()
	c.Set(5)
	c.Clear(100)
	b.Set(129)
	// Slots 129, 100 and 3: bytes 16-129/8=0, 16-100/8=4 and 16-3/8=16.
	if diff := cmp.Diff([]byte{0x02, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08}, b.Bytes()); diff != "" {
		t.Errorf("original after changing the clone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]byte{0x28}, c.Bytes()); diff != "" {
		t.Errorf("clone (-want +got):\n%s", diff)
	}
	if b.Used() != 3 || b.UsedStatic() != 1 || c.Used() != 2 || c.UsedStatic() != 2 {
		t.Errorf("counters: original %d/%d, clone %d/%d; want 3/1 and 2/2", b.Used(), b.UsedStatic(), c.Used(), c.UsedStatic())
	}
	if b.rand == c.rand {
		t.Error("clone shares the random source")
	}
	checkInvariants(t, b)
	checkInvariants(t, c)
}

func TestReset(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 4096, 64)
	for i := range 4096 {
		b.Set(i)
	}
	b.Reset()
	checkInvariants(t, b)
	if b.Used() != 0 || b.UsedStatic() != 0 || b.Free() != 4096 {
		t.Errorf("after Reset: Used=%d UsedStatic=%d Free=%d", b.Used(), b.UsedStatic(), b.Free())
	}
	if i, ok := b.NextFreeIn(0, 4096, 0); !ok || i != 0 {
		t.Errorf("first free after Reset = %d, %v; want 0", i, ok)
	}
}

// TestModel runs long random operation sequences against a map model; the
// same driver backs FuzzOps.
func TestModel(t *testing.T) {
	t.Parallel()
	sizes := []struct{ size, staticSize int }{
		{1, 0}, {2, 1}, {14, 0}, {30, 16}, {63, 16}, {64, 16}, {65, 16}, {127, 16}, {254, 16}, {1000, 62}, {4200, 64},
	}
	r := seeded(42)
	for _, s := range sizes {
		ops := make([]byte, 3*4000)
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		// Bias toward Set so that the sequences reach high fill levels.
		for i := 0; i < len(ops); i += 3 {
			if r.IntN(10) < 6 {
				ops[i] = modelOpSet
			}
		}
		runOps(t, s.size, s.staticSize, ops, 7)
	}
}

// Op codes for runOps; the first byte of each 3-byte op, modulo modelOpCount.
const (
	modelOpSet = iota
	modelOpClear
	modelOpNextDynamic
	modelOpHas
	modelOpCount
)

// runOps applies ops (3 bytes each: code, little-endian slot) to a Set
// and to a map model, checking they agree after every op. Slots are taken
// modulo size+2 and shifted down by one so -1 and size are exercised.
func runOps(t testing.TB, size, staticSize int, ops []byte, seed uint64) {
	t.Helper()
	b := mustNew(t, size, staticSize)
	b.SetRand(seeded(seed))
	model := map[int]bool{}
	for len(ops) >= 3 {
		code, slot := int(ops[0])%modelOpCount, int(uint16(ops[1])|uint16(ops[2])<<8)%(size+2)-1
		ops = ops[3:]
		inRange := slot >= 0 && slot < size
		switch code {
		case modelOpSet:
			if got, want := b.Set(slot), inRange && !model[slot]; got != want {
				t.Fatalf("Set(%d) = %v, want %v", slot, got, want)
			}
			if inRange {
				model[slot] = true
			}
		case modelOpClear:
			if got, want := b.Clear(slot), model[slot]; got != want {
				t.Fatalf("Clear(%d) = %v, want %v", slot, got, want)
			}
			delete(model, slot)
		case modelOpHas:
			if got := b.Has(slot); got != model[slot] {
				t.Fatalf("Has(%d) = %v, want %v", slot, got, model[slot])
			}
		case modelOpNextDynamic:
			i, ok := b.NextDynamic()
			checkDynamicPick(t, size, staticSize, model, i, ok)
			if ok {
				b.Set(i)
				model[i] = true
			}
		}
		if b.Used() != len(model) {
			t.Fatalf("Used = %d, model has %d", b.Used(), len(model))
		}
	}
	checkInvariants(t, b)
	usedStatic := 0
	for i := range model {
		if i < staticSize {
			usedStatic++
		}
	}
	if b.UsedStatic() != usedStatic || b.Free() != size-len(model) {
		t.Fatalf("UsedStatic=%d Free=%d, model %d and %d", b.UsedStatic(), b.Free(), usedStatic, size-len(model))
	}
	var got []int
	b.ForEach(func(i int) { got = append(got, i) })
	want := make([]int, 0, len(model))
	for i := range size {
		if model[i] {
			want = append(want, i)
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("ForEach (-model +got):\n%s", diff)
	}
	// The byte form must agree with the model too.
	if diff := cmp.Diff(modelBytes(model), b.Bytes()); diff != "" {
		t.Fatalf("Bytes (-model +got):\n%s", diff)
	}
}

// checkDynamicPick checks a NextDynamic answer against the model: free, in
// range, and in the upper band unless the upper band is full.
func checkDynamicPick(t testing.TB, size, staticSize int, model map[int]bool, i int, ok bool) {
	t.Helper()
	if len(model) == size {
		if ok {
			t.Fatalf("NextDynamic on a full bitmap = %d, true", i)
		}
		return
	}
	if !ok {
		t.Fatalf("NextDynamic = false with %d of %d used", len(model), size)
	}
	if i < 0 || i >= size || model[i] {
		t.Fatalf("NextDynamic = %d: out of range or taken", i)
	}
	upperUsed := 0
	for j := range model {
		if j >= staticSize {
			upperUsed++
		}
	}
	if upperFull := upperUsed == size-staticSize; upperFull != (i < staticSize) {
		t.Fatalf("NextDynamic = %d with the upper band full=%v", i, upperFull)
	}
}

// modelBytes encodes a model bit by bit, the slow obvious way, as the
// reference for Bytes: slot i is bit i%8 of byte len-1-i/8.
func modelBytes(model map[int]bool) []byte {
	highest := -1
	for i := range model {
		highest = max(highest, i)
	}
	out := make([]byte, highest/8+1)
	if highest < 0 {
		out = []byte{}
	}
	for i := range model {
		out[len(out)-1-i/8] |= 1 << (i % 8)
	}
	return out
}
