// Package mutate makes malformed variants of well-formed bytes for the
// tests that hold a decoder to its contract on bad input, the same on every
// run (a seeded generator) rather than only under go test -fuzz.
package mutate

import (
	"bytes"
	"math/rand/v2"
	"slices"
)

// Bytes returns a copy of one of from, picked by r, with one to six bytes
// changed, dropped (up to four at a time) or inserted; never empty. from
// must hold at least one non-empty value.
func Bytes(r *rand.Rand, from [][]byte) []byte {
	d := bytes.Clone(from[r.IntN(len(from))])
	for range 1 + r.IntN(6) {
		i := r.IntN(len(d))
		switch r.IntN(3) {
		case 0:
			d[i] = byte(r.IntN(256))
		case 1:
			d = slices.Delete(d, i, min(len(d), i+1+r.IntN(4)))
		case 2:
			d = slices.Insert(d, i, byte(r.IntN(256)))
		}
		if len(d) == 0 {
			d = []byte{0}
		}
	}
	return d
}
