package bitset

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// DataBeyondRangeError is returned by SetBytes when the data marks a slot the
// bitmap does not have, typically a RangeAllocation written for a larger range.
type DataBeyondRangeError struct {
	// Slot is the highest slot set in the data.
	Slot int
	// Size is the size of the bitmap the data was loaded into.
	Size int
}

func (e *DataBeyondRangeError) Error() string {
	return fmt.Sprintf("bitmap data has slot %d set, beyond the range size %d", e.Slot, e.Size)
}

// Bytes returns the contents in kube-apiserver's RangeAllocation.data format:
// the bitmap read as a big-endian unsigned integer with no leading zero bytes,
// so slot i is bit i%8 of byte len-1-i/8. When nothing is set the result is
// empty. The result does not alias the bitmap.
func (b *Set) Bytes() []byte {
	words := b.levels[0]
	top := len(words) - 1
	for top >= 0 && words[top] == 0 {
		top--
	}
	if top < 0 {
		return []byte{}
	}
	buf := make([]byte, (top+1)*8)
	for w := 0; w <= top; w++ {
		binary.BigEndian.PutUint64(buf[(top-w)*8:], words[w])
	}
	return buf[bits.LeadingZeros64(words[top])/8:]
}

// SetBytes replaces the contents with data in the format Bytes produces.
// Leading zero bytes are accepted. If data sets a slot at or beyond Size it
// returns a *DataBeyondRangeError and leaves the bitmap unchanged.
func (b *Set) SetBytes(data []byte) error {
	for len(data) > 0 && data[0] == 0 {
		data = data[1:]
	}
	if len(data) > 0 {
		highest := (len(data)-1)*8 + bits.Len8(data[0]) - 1
		if highest >= b.size {
			return &DataBeyondRangeError{Slot: highest, Size: b.size}
		}
	}
	// From here on data fits: len(data) <= 8*len(words).
	words := b.levels[0]
	clear(words)
	w := 0
	for ; len(data) >= 8; w++ {
		words[w] = binary.BigEndian.Uint64(data[len(data)-8:])
		data = data[:len(data)-8]
	}
	if len(data) > 0 {
		var pad [8]byte
		copy(pad[8-len(data):], data)
		words[w] = binary.BigEndian.Uint64(pad[:])
	}
	b.recount()
	return nil
}
