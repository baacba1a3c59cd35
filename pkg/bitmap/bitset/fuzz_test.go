package bitset

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzSetBytes feeds arbitrary RangeAllocation data to SetBytes: it never
// panics, keeps the invariants, and on success Bytes gives the data back
// without its leading zero bytes; on failure the bitmap is unchanged.
func FuzzSetBytes(f *testing.F) {
	f.Add([]byte{}, uint16(254))
	f.Add([]byte{0x02, 0x01}, uint16(254))
	f.Add([]byte{0x00, 0x00, 0x02, 0x01}, uint16(254))
	f.Add(append([]byte{0x3f}, bytes.Repeat([]byte{0xff}, 31)...), uint16(254))
	f.Add(append([]byte{0x40}, make([]byte, 31)...), uint16(254))
	f.Add([]byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0}, uint16(64))
	f.Add([]byte{0xff}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		staticSize := min(int(size), 16)
		b := mustNew(t, int(size), staticSize)
		if size > 3 {
			b.Set(int(size) - 1)
			b.Set(2)
		}
		before := b.Bytes()
		err := b.SetBytes(data)
		checkInvariants(t, b)
		if err != nil {
			var rangeErr *DataBeyondRangeError
			if !errors.As(err, &rangeErr) || rangeErr.Slot < int(size) {
				t.Fatalf("SetBytes error = %v", err)
			}
			if !bytes.Equal(b.Bytes(), before) {
				t.Fatal("a failed SetBytes changed the bitmap")
			}
			return
		}
		want := bytes.TrimLeft(data, "\x00")
		if got := b.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("Bytes = %x, want %x", got, want)
		}
	})
}

// FuzzOps runs an arbitrary sequence of Set, Clear, Has and NextDynamic on a
// bitmap and a map model (see runOps) and checks they always agree.
func FuzzOps(f *testing.F) {
	f.Add(uint16(254), uint8(16), []byte{modelOpSet, 0, 0, modelOpNextDynamic, 0, 0, modelOpClear, 1, 0}, uint64(1))
	f.Add(uint16(64), uint8(0), bytes.Repeat([]byte{modelOpNextDynamic, 0, 0}, 70), uint64(2))
	f.Add(uint16(65), uint8(16), bytes.Repeat([]byte{modelOpNextDynamic, 0, 0, modelOpSet, 64, 0, modelOpClear, 17, 0}, 40), uint64(3))
	f.Add(uint16(1), uint8(1), []byte{modelOpNextDynamic, 0, 0, modelOpHas, 1, 0, modelOpClear, 1, 0}, uint64(4))
	f.Fuzz(func(t *testing.T, size uint16, staticSize uint8, ops []byte, seed uint64) {
		// Keep each run cheap: the model check after every op is O(size).
		n := int(size % 5000)
		runOps(t, n, min(int(staticSize), n), ops, seed)
	})
}
