package faultproxy

import (
	"bytes"
	"fmt"
	"time"
)

// Direction is the direction of a connection's bytes a Fault affects.
type Direction int

const (
	Both       Direction = iota // zero value: both directions
	ToTarget                    // client → member (requests)
	FromTarget                  // member → client (responses)
)

func (d Direction) String() string {
	switch d {
	case Both:
		return "both"
	case ToTarget:
		return "to-target"
	case FromTarget:
		return "from-target"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Fault is what the proxy does to the chunks it reads. When more than one of
// Drop, Hold and Delay is set, the first of them in that order applies.
type Fault struct {
	// Delay forwards each affected chunk this long after it was read. Order
	// is kept per connection and direction: a delayed chunk delays every
	// chunk after it on that connection and direction (TCP is a stream).
	// While it waits, chunks read after it under the same fault are delayed
	// as long, matched or not: the connection lags instead of bursting once
	// the delayed chunk goes, so a gRPC client's cancellation still reaches
	// the member after the request it cancels, as much later as it was sent.
	Delay time.Duration
	// Hold keeps affected chunks (and, for order, everything after them on
	// that connection and direction) until the fault is changed by Set.
	Hold bool
	// Drop discards affected chunks and everything after them on that
	// connection and direction (a black hole: no reset, the peer just never
	// hears more) until the connection is cut or closed.
	Drop bool
	// RefuseNew closes new connections at once.
	RefuseNew bool
	// Direction chooses which direction the fault affects.
	Direction Direction
	// Match, if non-empty, limits the fault to chunks containing at least
	// one of these byte strings (for example an etcd key prefix such as
	// "/registry/services/specs/"); other chunks pass unless an earlier chunk
	// on the same connection and direction is still delayed or held (order).
	// A string split between two consecutive chunks matches the second.
	Match [][]byte
}

// clone returns f with its own copy of Match, so the caller may reuse its
// slices after Set.
func (f Fault) clone() Fault {
	if f.Match == nil {
		return f
	}
	m := make([][]byte, len(f.Match))
	for i, b := range f.Match {
		m[i] = bytes.Clone(b)
	}
	f.Match = m
	return f
}

// action is what happens to one chunk.
type action int

const (
	pass action = iota
	delay
	hold
	drop
)

// judge decides what happens to chunk, read in direction dir right after the
// bytes ending in before.
func (f *Fault) judge(dir Direction, before, chunk []byte) action {
	if f.Direction != Both && f.Direction != dir {
		return pass
	}
	if !f.matches(before, chunk) {
		return pass
	}
	switch {
	case f.Drop:
		return drop
	case f.Hold:
		return hold
	case f.Delay > 0:
		return delay
	}
	return pass
}

// matches reports whether chunk, or chunk joined to the end of before,
// contains one of f.Match. For a string of length n only the last n-1 bytes
// of before count: a string lying wholly in before matched the chunk before.
func (f *Fault) matches(before, chunk []byte) bool {
	if len(f.Match) == 0 {
		return true
	}
	for _, m := range f.Match {
		if bytes.Contains(chunk, m) {
			return true
		}
		if len(m) < 2 {
			continue
		}
		head := before[max(0, len(before)-(len(m)-1)):]
		if len(head) == 0 {
			continue
		}
		seam := make([]byte, 0, len(head)+len(m)-1)
		seam = append(seam, head...)
		seam = append(seam, chunk[:min(len(chunk), len(m)-1)]...)
		if bytes.Contains(seam, m) {
			return true
		}
	}
	return false
}

// tailLen is how many bytes of a chunk the next chunk is matched with.
func (f *Fault) tailLen() int {
	n := 0
	for _, m := range f.Match {
		n = max(n, len(m)-1)
	}
	return n
}

// faultState is one fault in force, immutable once published.
type faultState struct {
	fault Fault
	gen   uint64    // increases with every Set
	at    time.Time // when Set put it in force
	// changed is closed when a later Set replaces this state.
	changed chan struct{}
}
