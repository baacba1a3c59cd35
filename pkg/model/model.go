// Package model names the two ClusterIP allocator models.
//
// Invariants:
//   - A model is spelled only through Name: Bitmap (one RangeAllocation per
//     IP family, kube-apiserver ≤ 1.32) or IPAddress (one IPAddress object
//     per address over ServiceCIDRs, ≥ 1.33). Auto is a request to detect,
//     never a model: ipallocator.Detect is the only code that resolves it.
//   - The package imports the standard library only, so that the address
//     math of pkg/subrange, at the floor of the import graph, takes the same
//     type as the server and the CLI.
//   - Parse and String are the only code that turns a model into text and
//     back; everything else compares Names, and only the code listed in
//     switch_test.go (mayBranch) branches on one: the test fails when
//     another place does, or spells a model as a string literal.
package model

import "fmt"

// Name is an allocator model.
type Name string

const (
	// Bitmap is the RangeAllocation bitmap model.
	Bitmap Name = "bitmap"
	// IPAddress is the IPAddress-object model (MultiCIDRServiceAllocator).
	IPAddress Name = "ipaddress"
	// Auto asks ipallocator.Detect to tell the model from what etcd holds.
	Auto Name = "auto"
)

// Parse reads a --model/--allocator value; allowAuto accepts "auto".
func Parse(s string, allowAuto bool) (Name, error) {
	switch n := Name(s); n {
	case Bitmap, IPAddress:
		return n, nil
	case Auto:
		if allowAuto {
			return n, nil
		}
	}
	if allowAuto {
		return "", fmt.Errorf("unknown model %q: use %s, %s or %s", s, Bitmap, IPAddress, Auto)
	}
	return "", fmt.Errorf("unknown model %q: use %s or %s", s, Bitmap, IPAddress)
}

// String returns the model's name as flags and reports spell it.
func (n Name) String() string { return string(n) }
