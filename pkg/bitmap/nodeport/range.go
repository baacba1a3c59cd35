package nodeport

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Default is kube-apiserver's default --service-node-port-range.
const Default = "30000-32767"

// MaxPort is the highest TCP/UDP port.
const MaxPort = 65535

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("invalid port range")

// Range is a contiguous range of ports [Base, Base+Size).
type Range struct {
	base, size int
}

// New returns the range [base, base+size).
func New(base, size int) (Range, error) {
	if base < 1 || base > MaxPort {
		return Range{}, fmt.Errorf("%w: start port %d is not within 1-%d", ErrInvalid, base, MaxPort)
	}
	if size < 2 || base+size-1 > MaxPort {
		return Range{}, fmt.Errorf("%w: %d ports from %d do not fit within 1-%d with at least 2 ports", ErrInvalid, size, base, MaxPort)
	}
	return Range{base: base, size: size}, nil
}

// MustParse is Parse for constants; it panics on error.
func MustParse(s string) Range {
	r, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Parse reads a range the way kube-apiserver's --service-node-port-range is
// written: "min-max" (inclusive) or "min+offset" (min to min+offset). A single
// port, port 0, a port above 65535, a reversed range and anything that is not
// a number are errors wrapping ErrInvalid.
func Parse(s string) (Range, error) {
	value := strings.TrimSpace(s)
	hyphen := strings.Index(value, "-")
	plus := strings.Index(value, "+")
	var lowText, highText string
	switch {
	case value == "":
		return Range{}, fmt.Errorf("%w: empty", ErrInvalid)
	case hyphen >= 0 && plus >= 0:
		return Range{}, fmt.Errorf("%w: %q mixes \"-\" and \"+\"", ErrInvalid, s)
	case hyphen >= 0:
		lowText, highText = value[:hyphen], value[hyphen+1:]
	case plus >= 0:
		lowText, highText = value[:plus], value[plus+1:]
	default:
		if _, err := parsePort(value); err != nil {
			return Range{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
		}
		return Range{}, fmt.Errorf("%w: %q is a single port, want min-max such as %s", ErrInvalid, s, Default)
	}
	low, err := parsePort(lowText)
	if err != nil {
		return Range{}, fmt.Errorf("%w: %q: start: %v", ErrInvalid, s, err)
	}
	offset, err := parsePort(highText)
	if err != nil {
		return Range{}, fmt.Errorf("%w: %q: end: %v", ErrInvalid, s, err)
	}
	high := offset
	if plus >= 0 {
		high = low + offset
	}
	switch {
	case low == 0:
		return Range{}, fmt.Errorf("%w: %q: port 0 is not a valid node port", ErrInvalid, s)
	case high > MaxPort:
		return Range{}, fmt.Errorf("%w: %q: the port range cannot be greater than %d", ErrInvalid, s, MaxPort)
	case high < low:
		return Range{}, fmt.Errorf("%w: %q: end port cannot be less than start port", ErrInvalid, s)
	case high == low:
		return Range{}, fmt.Errorf("%w: %q is a single port, want at least 2", ErrInvalid, s)
	}
	return Range{base: low, size: high - low + 1}, nil
}

// parsePort reads a decimal number of at most 5 digits with no sign.
func parsePort(text string) (int, error) {
	if text == "" || len(text) > 5 || strings.TrimLeft(text, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a port number", text)
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number", text)
	}
	if n > MaxPort {
		return 0, fmt.Errorf("%d is greater than %d", n, MaxPort)
	}
	return n, nil
}

// Base is the first port of the range.
func (r Range) Base() int { return r.base }

// Size is the number of ports.
func (r Range) Size() int { return r.size }

// Last is the last port of the range.
func (r Range) Last() int { return r.base + r.size - 1 }

// IsZero reports whether r is the zero Range (no ports).
func (r Range) IsZero() bool { return r.size == 0 }

// String is "base-last", as kube-apiserver writes the range.
func (r Range) String() string {
	if r.size == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.base, r.Last())
}

// Contains reports whether port is in the range.
func (r Range) Contains(port int) bool {
	return port >= r.base && port-r.base < r.size
}

// Index is the slot of port, false when port is outside the range.
func (r Range) Index(port int) (int, bool) {
	if !r.Contains(port) {
		return 0, false
	}
	return port - r.base, true
}

// Port is the port of slot i, false when i is outside the range.
func (r Range) Port(i int) (int, bool) {
	if i < 0 || i >= r.size {
		return 0, false
	}
	return r.base + i, true
}

// StaticSize is the number of ports in the lower (static) band.
func (r Range) StaticSize() int { return StaticBandSize(r.size) }

// StaticBandSize is upstream's node-port band for a range of size ports:
// min(max(16, size/32), 128), and 0 when size ≤ 16.
func StaticBandSize(size int) int {
	const (
		minBand = 16
		maxBand = 128
		step    = 32
	)
	if size <= minBand {
		return 0
	}
	return min(max(minBand, size/step), maxBand)
}

// Spec, Slots, StaticSlots and Matches make a Range the space of a bitmap
// RangeAllocation store (pkg/bitmap.Space).

// Spec is the RangeAllocation's range field.
func (r Range) Spec() string { return r.String() }

// Slots is Size.
func (r Range) Slots() int { return r.size }

// StaticSlots is StaticSize.
func (r Range) StaticSlots() int { return r.StaticSize() }

// Matches reports whether a stored range field names r (by value: "30000+2767"
// matches "30000-32767").
func (r Range) Matches(stored string) bool {
	s, err := Parse(stored)
	return err == nil && s == r
}
