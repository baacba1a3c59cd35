package bitset

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/allocator/allocator/internal/fixtures"
)

func TestBytesGolden(t *testing.T) {
	t.Parallel()
	// A full /24 (254 slots): bits 0..253 set is 31 bytes of 0xff for slots
	// 0..247 and then 6 bits (slots 248..253) in the leading byte: 0x3f.
	fullSlash24 := append([]byte{0x3f}, bytes.Repeat([]byte{0xff}, 31)...)
	tests := []struct {
		name             string
		size, staticSize int
		slots            []int
		want             []byte
	}{
		{"empty", 254, 16, nil, []byte{}},
		{"slots 0 and 9 (design.md §5: .1 and .10 of a /24)", 254, 16, []int{0, 9}, []byte{0x02, 0x01}},
		{"slot 0", 254, 16, []int{0}, []byte{0x01}},
		{"slot 7", 254, 16, []int{7}, []byte{0x80}},
		{"slot 8", 254, 16, []int{8}, []byte{0x01, 0x00}},
		{"slot 63", 64, 0, []int{63}, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
		{"slot 64", 65, 0, []int{64}, []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"full /24", 254, 16, nil, fullSlash24},
		{"full /30", 2, 0, []int{0, 1}, []byte{0x03}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.size, tt.staticSize)
			slots := tt.slots
			if tt.name == "full /24" {
				for i := range 254 {
					slots = append(slots, i)
				}
			}
			for _, i := range slots {
				b.Set(i)
			}
			got := b.Bytes()
			if got == nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("Bytes = %#v, want %#v", got, tt.want)
			}
			c := mustNew(t, tt.size, tt.staticSize)
			if err := c.SetBytes(tt.want); err != nil {
				t.Fatalf("SetBytes(%x): %v", tt.want, err)
			}
			var back []int
			c.ForEach(func(i int) { back = append(back, i) })
			if diff := cmp.Diff(slots, back, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("slots after SetBytes (-want +got):\n%s", diff)
			}
			checkInvariants(t, c)
		})
	}
}

func TestBytesDoesNotAlias(t *testing.T) {
	t.Parallel()
	b := mustNew(t, 64, 0)
	b.Set(0)
	out := b.Bytes()
	out[0] = 0xff
	if b.Used() != 1 || !bytes.Equal(b.Bytes(), []byte{0x01}) {
		t.Fatal("changing the result of Bytes changed the bitmap")
	}
}

func TestBytesRoundTrip(t *testing.T) {
	t.Parallel()
	r := seeded(5)
	for _, s := range []struct{ size, staticSize int }{
		{1, 0}, {14, 0}, {63, 16}, {64, 16}, {65, 16}, {254, 16}, {4094, 256}, {65534, 256}, {1048574, 256},
	} {
		for _, fill := range []float64{0, 0.001, 0.5, 0.999, 1} {
			b := mustNew(t, s.size, s.staticSize)
			for i := range s.size {
				if r.Float64() < fill {
					b.Set(i)
				}
			}
			data := b.Bytes()
			if len(data) > 0 && data[0] == 0 {
				t.Fatalf("size %d fill %v: Bytes has a leading zero byte", s.size, fill)
			}
			c := mustNew(t, s.size, s.staticSize)
			c.Set(0) // SetBytes replaces, it does not merge
			if err := c.SetBytes(data); err != nil {
				t.Fatalf("size %d fill %v: SetBytes: %v", s.size, fill, err)
			}
			if c.Used() != b.Used() || c.UsedStatic() != b.UsedStatic() {
				t.Fatalf("size %d fill %v: counters %d/%d after SetBytes, want %d/%d",
					s.size, fill, c.Used(), c.UsedStatic(), b.Used(), b.UsedStatic())
			}
			if !bytes.Equal(c.Bytes(), data) {
				t.Fatalf("size %d fill %v: Bytes after SetBytes differs", s.size, fill)
			}
			if s.size <= 65534 {
				checkInvariants(t, c)
			}
		}
	}
}

func TestSetBytesBeyondRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		data []byte
		slot int
	}{
		{"one past the end", 254, append([]byte{0x40}, make([]byte, 31)...), 254},
		{"top bit of a longer buffer", 254, append([]byte{0x80, 0}, make([]byte, 31)...), 263},
		{"IPv6 window", 65534, append([]byte{0x01}, make([]byte, 8750)...), 70000},
		{"zero-size bitmap", 0, []byte{0x01}, 0},
		{"partial last word", 65, []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}, 65},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, tt.size, 0)
			if tt.size > 1 {
				b.Set(1)
			}
			before := b.Bytes()
			err := b.SetBytes(tt.data)
			var rangeErr *DataBeyondRangeError
			if !errors.As(err, &rangeErr) {
				t.Fatalf("SetBytes error = %v, want a *DataBeyondRangeError", err)
			}
			if diff := cmp.Diff(&DataBeyondRangeError{Slot: tt.slot, Size: tt.size}, rangeErr); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !bytes.Equal(b.Bytes(), before) {
				t.Errorf("bitmap changed by a failed SetBytes: %x, was %x", b.Bytes(), before)
			}
			checkInvariants(t, b)
		})
	}
	err := (&DataBeyondRangeError{Slot: 70000, Size: 65534}).Error()
	if want := "bitmap data has slot 70000 set, beyond the range size 65534"; err != want {
		t.Errorf("error text = %q, want %q", err, want)
	}
}

func TestSetBytesLeadingZeros(t *testing.T) {
	t.Parallel()
	for _, data := range [][]byte{
		{0x02, 0x01},
		{0x00, 0x02, 0x01},
		append(make([]byte, 40), 0x02, 0x01), // longer than the bitmap
	} {
		b := mustNew(t, 254, 16)
		if err := b.SetBytes(data); err != nil {
			t.Fatalf("SetBytes(%x): %v", data, err)
		}
		if diff := cmp.Diff([]byte{0x02, 0x01}, b.Bytes()); diff != "" {
			t.Errorf("SetBytes(%x) then Bytes (-want +got):\n%s", data, diff)
		}
		if !b.Has(0) || !b.Has(9) || b.Used() != 2 || b.UsedStatic() != 2 {
			t.Errorf("SetBytes(%x): Has(0)=%v Has(9)=%v Used=%d UsedStatic=%d", data, b.Has(0), b.Has(9), b.Used(), b.UsedStatic())
		}
	}
	for _, data := range [][]byte{nil, {}, {0}, make([]byte, 100)} {
		b := mustNew(t, 254, 16)
		b.Set(3)
		if err := b.SetBytes(data); err != nil {
			t.Fatalf("SetBytes(%x): %v", data, err)
		}
		if b.Used() != 0 || len(b.Bytes()) != 0 {
			t.Errorf("SetBytes(%x): Used=%d Bytes=%x, want empty", data, b.Used(), b.Bytes())
		}
	}
}

// TestKubeAPIServerFixture loads the RangeAllocation that kube-apiserver
// 1.32 wrote for 10.96.0.0/16 (testdata/, docs/design.md §5) and checks
// we read the slots kubectl reported and write back the very same bytes.
func TestKubeAPIServerFixture(t *testing.T) {
	t.Parallel()
	const key = "/registry/ranges/serviceips"
	fx := fixtures.Load(t, fixtures.Bitmap132)
	value, ok := fx.Value(key)
	want, okWant := fx.Expect.Bitmaps[key]
	if !ok || !okWant || want.Range != "10.96.0.0/16" {
		t.Fatalf("fixture has no %s for 10.96.0.0/16", key)
	}
	// The value is "k8s\x00" + runtime.Unknown{raw: 2} whose raw is
	// RangeAllocation{range: 2, data: 3}; a few lines of protobuf reading
	// keep this package free of Kubernetes dependencies.
	envelope, ok := bytes.CutPrefix(value, []byte("k8s\x00"))
	if !ok {
		t.Fatalf("value lacks the k8s protobuf envelope: %q", value[:8])
	}
	object := protoBytesField(t, envelope, 2)
	if got := string(protoBytesField(t, object, 2)); got != want.Range {
		t.Fatalf("RangeAllocation.range = %q, want %q", got, want.Range)
	}
	data := protoBytesField(t, object, 3)

	b := mustNew(t, 65534, 256) // a /16: 2^16-2 usable, band offset 256
	if err := b.SetBytes(data); err != nil {
		t.Fatalf("SetBytes: %v", err)
	}
	var slots []int
	b.ForEach(func(i int) { slots = append(slots, i) })
	if diff := cmp.Diff(want.BitIndexes, slots); diff != "" {
		t.Errorf("slots (-kubectl +got):\n%s", diff)
	}
	if !bytes.Equal(b.Bytes(), data) {
		t.Errorf("Bytes differs from what kube-apiserver wrote:\n got %x\nwant %x", b.Bytes(), data)
	}
	checkInvariants(t, b)
}

// protoBytesField returns the last length-delimited field num of a protobuf
// message, skipping varint and fixed-width fields.
func protoBytesField(t *testing.T, msg []byte, num int) []byte {
	t.Helper()
	varint := func() uint64 {
		var v uint64
		for shift := 0; ; shift += 7 {
			if len(msg) == 0 || shift > 63 {
				t.Fatal("truncated varint")
			}
			c := msg[0]
			msg = msg[1:]
			v |= uint64(c&0x7f) << shift
			if c < 0x80 {
				return v
			}
		}
	}
	var found []byte
	for len(msg) > 0 {
		tag := varint()
		switch tag & 7 {
		case 0:
			varint()
		case 1:
			msg = msg[8:]
		case 5:
			msg = msg[4:]
		case 2:
			n := varint()
			if n > uint64(len(msg)) {
				t.Fatal("truncated field")
			}
			if int(tag>>3) == num {
				found = msg[:n]
			}
			msg = msg[n:]
		default:
			t.Fatalf("unsupported wire type %d", tag&7)
		}
	}
	if found == nil {
		t.Fatalf("field %d not found", num)
	}
	return found
}
