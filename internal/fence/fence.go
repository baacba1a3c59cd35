package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdhistory"
	"github.com/allocator/allocator/internal/etcdquota"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// ErrFenced answers a write made after its fence was closed: it was not
// applied, and never will be. The error a guarded write returns matches it
// with errors.Is and is an API status of its own (fencedError).
var ErrFenced = errors.New("the request's writes are fenced: not applied")

// fencedError is ErrFenced for the write of key. It is an API status (504,
// Timeout: an earlier write of the request lost its answer), returned
// unwrapped, so that the API server answers the client with it rather than
// with an unstructured 500.
type fencedError struct{ key string }

func (e *fencedError) Error() string {
	return fmt.Sprintf("write of %s: %v (an earlier write of the request lost its answer)", e.key, ErrFenced)
}

func (e *fencedError) Is(target error) bool { return target == ErrFenced }

func (e *fencedError) Status() metav1.Status {
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusGatewayTimeout,
		Reason:  metav1.StatusReasonTimeout,
		Message: e.Error(),
	}
}

// errFenceDone refuses a write under a fence whose request is Done.
var errFenceDone = errors.New("the request's fence is done: it writes no more")

// ErrOutcomeLost answers Close when a write's outcome can no longer be
// learned: the request's lease expired before the fence was closed, or the
// write carried no marker (a delete sent again unmarked when etcd was out of
// space). Either way it can no longer be applied.
var ErrOutcomeLost = errors.New("the write's lease expired before its outcome was read")

// Fence names the writes of one request. It is safe for concurrent use
// (a collection delete writes several keys at once under one fence).
type Fence struct {
	key string // the fence's etcd key

	mu     sync.Mutex
	leases *Leases          // where lease came from; guarded by mu
	lease  clientv3.LeaseID // the lease of the request's writes; guarded by mu
	done   bool             // Done was called; guarded by mu
	seq    int              // writes made so far; guarded by mu
	last   map[string]write // the last write of each key; guarded by mu
}

// write is what a Fence knows of one guarded write.
type write struct {
	outcome  outcome
	marker   string           // the key the write creates when applied; "": none
	lease    clientv3.LeaseID // the request's lease, its marker's
	expected int64            // the ModRevision its compare expected (0: absent)
	delete   bool             // a delete, not a put
	claim    bool             // a claim (GuardClaims): known by its value, unmarked
	value    string           // what a claim wrote
}

type outcome int

const (
	applied outcome = iota + 1 // etcd answered: applied
	refused                    // etcd answered: not applied (a compare failed)
	unknown                    // no answer: applied or not, or later
)

// New returns a fence with a fresh random key under layout's prefix.
func New(layout etcdlayout.Layout) *Fence {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &Fence{key: layout.Fence(hex.EncodeToString(b[:])), last: map[string]write{}}
}

// Key returns the fence's etcd key.
func (f *Fence) Key() string { return f.key }

type contextKey struct{}

// NewContext returns ctx carrying f: writes a Guard store makes with it are
// fenced by f.
func NewContext(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, contextKey{}, f)
}

// Unfenced returns ctx without a fence: writes made with it are not fenced
// by the request's (releases, which must work after it was closed).
func Unfenced(ctx context.Context) context.Context {
	if FromContext(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, contextKey{}, (*Fence)(nil))
}

// FromContext returns the fence ctx carries, or nil.
func FromContext(ctx context.Context) *Fence {
	f, _ := ctx.Value(contextKey{}).(*Fence)
	return f
}

// begin names the next write of key: its lease and, when marked, its
// marker. The request's first write takes the guard's current lease, held
// until Done; every later one uses it too.
func (f *Fence) begin(ctx context.Context, l *Leases, marked bool) (write, error) {
	f.mu.Lock()
	lease := f.lease
	f.mu.Unlock()
	if lease == clientv3.NoLease {
		id, err := l.acquire(ctx)
		if err != nil {
			return write{}, err
		}
		f.mu.Lock()
		took := f.lease == clientv3.NoLease && !f.done
		if took {
			f.lease, f.leases = id, l
		}
		f.mu.Unlock()
		if !took { // another write of the request took one first, or it is over
			l.release(id)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return write{}, errFenceDone
	}
	w := write{lease: f.lease}
	if marked {
		f.seq++
		w.marker = f.key + "/w" + strconv.Itoa(f.seq)
	}
	return w, nil
}

// record notes the outcome of w, a write of key.
func (f *Fence) record(key string, w write) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[key] = w
}

// renewLease drops the request's lease, which etcd no longer has, so that
// the next write takes a new one. It refuses when a write's outcome is
// still unknown: its marker and its fence must share its lease.
func (f *Fence) renewLease(gone clientv3.LeaseID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lostLocked() {
		return false
	}
	if f.lease == gone {
		f.leases.release(gone)
		f.lease, f.leases = clientv3.NoLease, nil
	}
	return true
}

// Done says the request writes no more and needs the outcome of its writes
// no more (it learned them, or left them to the repair): the lease it holds
// may be revoked once no other request holds it. Call it once, when the
// request and whatever settles its writes after it have finished; the
// request's markers and fence key go with the lease.
func (f *Fence) Done() {
	f.mu.Lock()
	l, id := f.leases, f.lease
	f.done, f.leases, f.lease = true, nil, clientv3.NoLease
	f.mu.Unlock()
	if l != nil {
		l.release(id)
	}
}

func (f *Fence) lastWrite(key string) (write, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.last[key]
	return w, ok
}

// Outcome is the fate of a request's last write of a key, known for good.
type Outcome struct {
	// Landed reports whether the write was applied; for a claim whose
	// answer was lost (GuardClaims), whether it was applied and key still
	// holds what it wrote.
	Landed bool
	// Delete reports whether that write was a delete (else a put, or no
	// write at all): a caller settling a delete must not take an applied
	// put of the same request (a graceful update before it) for its delete.
	Delete bool
	// Current is the key as stored at the revision Close read it: nil when
	// absent. It is what the request's writes and anyone's after them left.
	Current *mvccpb.KeyValue
}

// closeAttempt bounds Close's first attempt, and each next one is given
// twice as long: an attempt sent to a member that holds it (a stalled
// connection) gives way to the next, which the client sends to the next
// endpoint, and a member that is only slow (the one endpoint there is) is
// still waited for.
const closeAttempt = 3 * time.Second

// Close makes the outcome of the request's last write of key known. When a
// write of the request lost its answer, it creates the fence key, after
// which no write of the request can be applied, and in the same transaction
// reads key and, when that write was key's last, its marker (a claim is
// known by key's value instead). When every answer came back there is
// nothing to fence (the request may go on writing): the record says the
// outcome, and key is read. A transaction whose own answer is lost, or
// that takes longer than its attempt's bound (closeAttempt, doubling), is
// sent again (creating the fence twice is harmless) until ctx ends; etcd
// out of space fails it at once.
// ErrOutcomeLost says the outcome can no longer be learned: the request's
// lease ended first (none of its marked writes can be applied any more), or
// the write (not a claim) carried no marker.
func (f *Fence) Close(ctx context.Context, c *clientv3.Client, key string) (Outcome, error) {
	var last error
	attempt := closeAttempt
	for delay := 50 * time.Millisecond; ; delay, attempt = min(2*delay, time.Second), 2*attempt {
		actx, cancel := context.WithTimeout(ctx, attempt)
		o, err := f.closeOnce(actx, c, key)
		cancel()
		if err == nil || errors.Is(err, ErrOutcomeLost) || etcdquota.Exceeded(err) || errors.Is(err, etcdhistory.ErrRestored) {
			// A fence etcd has no space for waits for an operator, not for
			// a retry; one refused after a restore, for a new process.
			return o, err
		}
		last = err
		select {
		case <-ctx.Done():
			return Outcome{}, fmt.Errorf("close fence %s of %s: %w", f.key, key, last)
		case <-time.After(delay):
		}
	}
}

func (f *Fence) closeOnce(ctx context.Context, c *clientv3.Client, key string) (Outcome, error) {
	w, wrote := f.lastWrite(key)
	f.mu.Lock()
	lease, lost := f.lease, f.lostLocked()
	f.mu.Unlock()
	if !lost { // every answer came back: nothing to fence, the record says it
		resp, err := c.Get(ctx, key)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Landed: wrote && w.outcome == applied, Delete: wrote && w.delete, Current: first(resp.Kvs)}, nil
	}
	ops := []clientv3.Op{
		clientv3.OpPut(f.key, "", clientv3.WithLease(lease)), // no write of the request applies from here on
		clientv3.OpGet(key), // what the request's writes and later ones left
	}
	pending := wrote && w.outcome == unknown // then w.lease is the request's lease
	if pending && w.marker != "" {
		ops = append(ops, clientv3.OpGet(w.marker, clientv3.WithCountOnly())) // whether it was applied before
	}
	// A claim has no marker: whether key holds what it wrote says it.
	resp, err := c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		if leaseGone(err) {
			return Outcome{}, fmt.Errorf("close fence %s of %s: %w", f.key, key, ErrOutcomeLost)
		}
		return Outcome{}, err
	}
	if len(resp.Responses) != len(ops) {
		return Outcome{}, fmt.Errorf("fence transaction answered %d results, want %d", len(resp.Responses), len(ops))
	}
	o := Outcome{Delete: wrote && w.delete, Current: first(resp.Responses[1].GetResponseRange().GetKvs())}
	switch {
	case pending && w.claim:
		o.Landed = o.Current != nil && string(o.Current.Value) == w.value
	case pending && w.marker == "":
		return Outcome{}, fmt.Errorf("close fence %s of %s: the write carried no marker: %w", f.key, key, ErrOutcomeLost)
	case pending:
		o.Landed = resp.Responses[2].GetResponseRange().GetCount() > 0
	case wrote:
		o.Landed = w.outcome == applied
	}
	return o, nil
}

// lostLocked reports whether a write of the request lost its answer. The
// caller holds f.mu.
func (f *Fence) lostLocked() bool {
	for _, w := range f.last {
		if w.outcome == unknown {
			return true
		}
	}
	return false
}

// Replaced returns what the request's last write of key replaced: key as
// stored at the revision that write's compare expected; nil for a create or
// when key has no recorded write. An error says that version is no longer
// readable (compacted).
func (f *Fence) Replaced(ctx context.Context, c *clientv3.Client, key string) (*mvccpb.KeyValue, error) {
	w, ok := f.lastWrite(key)
	if !ok || w.expected == 0 {
		return nil, nil
	}
	resp, err := c.Get(ctx, key, clientv3.WithRev(w.expected))
	if err != nil {
		return nil, fmt.Errorf("read %s at revision %d: %w", key, w.expected, err)
	}
	kv := first(resp.Kvs)
	if kv == nil || kv.ModRevision != w.expected {
		return nil, fmt.Errorf("read %s at revision %d: that version is not there", key, w.expected)
	}
	return kv, nil
}

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}
