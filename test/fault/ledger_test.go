package fault

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allocator/allocator/internal/invariants"
)

// op is a kind of write.
type op int

const (
	opCreate op = iota
	opUpdate
	opDelete
	nOps
)

func (o op) String() string { return [...]string{"create", "update", "delete"}[o] }

// expect is what the ledger knows of a Service after its writes.
type expect int

const (
	// stored: acknowledged; stored with exactly want.
	stored expect = iota
	// storedPrimary: acknowledged, then an update failed; stored, same
	// UID and primary address as want, the update applied or not.
	storedPrimary
	// absent: an acknowledged delete, or a refused create.
	absent
	// absentOrStored: acknowledged, then a delete failed; absent, or
	// stored with exactly want.
	absentOrStored
	// unknown: a create failed; stored or not, anything is right.
	unknown
)

// entry is one Service name of the ledger. A worker stops writing a name
// after a failed write, so a failure is always the entry's last write. A
// refused update or delete leaves what the entry expected as it was.
type entry struct {
	expect expect
	want   invariants.Holding // what the last acknowledged write left
	last   op                 // the last write sent
}

// ledger records every write the workers sent and what came of it.
type ledger struct {
	mu      sync.Mutex
	entries map[string]*entry // guarded by mu; by "namespace/name"
	sent    [nOps]int         // guarded by mu
	failed  [nOps]int         // guarded by mu
	refused [nOps]int         // guarded by mu; of failed
}

// refused reports whether err says the write was refused before anything
// was written: an API status below 500 (invalid, conflict, ...) or a full
// range (500, but the allocation failed before the Service was written).
func refused(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if code := status.Status().Code; code >= 400 && code < 500 {
			return true
		}
	}
	return strings.Contains(err.Error(), "range is full")
}

func newLedger() *ledger { return &ledger{entries: map[string]*entry{}} }

// acked records an acknowledged write of name; got is what the answer holds
// (ignored for a delete).
func (l *ledger) acked(name string, o op, got invariants.Holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[o]++
	e := l.entry(name)
	e.last = o
	if o == opDelete {
		e.expect, e.want = absent, invariants.Holding{}
		return
	}
	e.expect, e.want = stored, got
}

// filled records an acknowledged create of phase 2, which the figures of
// writes sent do not count.
func (l *ledger) filled(name string, got invariants.Holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(name)
	e.last, e.expect, e.want = opCreate, stored, got
}

// failedWrite records a write of name that failed with err. A refused
// write (refused says which) changed nothing; any other failure leaves its
// outcome unknown.
func (l *ledger) failedWrite(name string, o op, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[o]++
	l.failed[o]++
	e := l.entry(name)
	e.last = o
	if refused(err) {
		l.refused[o]++
		if o == opCreate {
			e.expect = absent
		}
		return
	}
	switch o {
	case opCreate:
		e.expect = unknown
	case opUpdate:
		e.expect = storedPrimary
	case opDelete:
		e.expect = absentOrStored
	}
}

func (l *ledger) entry(name string) *entry {
	e, ok := l.entries[name]
	if !ok {
		e = &entry{expect: unknown}
		l.entries[name] = e
	}
	return e
}

// outcome is the ledger held against what etcd stores.
type outcome struct {
	sent, failed, refused [nOps]int
	// landed are the failed writes that took effect anyway: creates stored,
	// updates applied, deletes done.
	landed [nOps]int
	// lost are acknowledged writes that etcd contradicts, one line each.
	lost []string
}

// check compares the ledger with the stored Services.
func (l *ledger) check(services map[string]invariants.Holding) outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := outcome{sent: l.sent, failed: l.failed, refused: l.refused}
	same := func(a, b invariants.Holding) bool { return cmp.Equal(a, b, cmpopts.EquateEmpty()) }
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range l.entries {
			if !yield(name) {
				return
			}
		}
	})
	for _, name := range names {
		e := l.entries[name]
		got, ok := services[name]
		lost := func(format string, args ...any) {
			o.lost = append(o.lost, fmt.Sprintf("%s (last write: %s): ", name, e.last)+fmt.Sprintf(format, args...))
		}
		switch e.expect {
		case stored:
			switch {
			case !ok:
				lost("acknowledged with %v, not stored", e.want)
			case !same(got, e.want):
				lost("acknowledged with %v, stored with %v", e.want, got)
			}
		case storedPrimary:
			switch {
			case !ok:
				lost("acknowledged with %v, not stored after a failed update", e.want)
			case got.UID != e.want.UID || len(got.IPs) == 0 || got.IPs[0] != e.want.IPs[0]:
				lost("acknowledged with %v, stored with %v after a failed update", e.want, got)
			case !same(got, e.want):
				o.landed[opUpdate]++
			}
		case absent:
			switch {
			case ok && e.last == opCreate:
				lost("refused, stored with %v", got)
			case ok:
				lost("deleted, still stored with %v", got)
			}
		case absentOrStored:
			switch {
			case !ok:
				o.landed[opDelete]++
			case !same(got, e.want):
				lost("acknowledged with %v, stored with %v after a failed delete", e.want, got)
			}
		case unknown:
			if ok {
				o.landed[opCreate]++
			}
		}
	}
	return o
}

// describe says what the ledger knows of name's last write, for the log of
// a duplicate.
func (l *ledger) describe(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[name]
	switch {
	case !ok:
		return "never written by the harness"
	case e.expect == stored || e.expect == absent:
		return e.last.String() + " acknowledged"
	}
	return e.last.String() + " failed"
}
