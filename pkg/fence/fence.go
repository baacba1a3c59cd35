package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Lifetime is how long a closed fence is kept.
const Lifetime = time.Hour

// ErrFenced answers a write made after its fence was closed: it was not
// applied, and never will be.
var ErrFenced = errors.New("the request's writes are fenced: not applied")

// Fence names the writes of one request. It is safe for concurrent use.
type Fence struct {
	key string // the fence's etcd key
}

// New returns a fence with a fresh random key under layout's prefix.
func New(layout etcdlayout.Layout) *Fence {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &Fence{key: layout.Fence(hex.EncodeToString(b[:]))}
}

// Key returns the fence's etcd key.
func (f *Fence) Key() string { return f.key }

type contextKey struct{}

// NewContext returns ctx carrying f: writes a Guard store makes with it are
// fenced by f.
func NewContext(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, contextKey{}, f)
}

// FromContext returns the fence ctx carries, or nil.
func FromContext(ctx context.Context) *Fence {
	f, _ := ctx.Value(contextKey{}).(*Fence)
	return f
}

// Close makes the outcome of every write made under f known. It creates the
// fence key (with a lease of Lifetime) and reads key in the same
// transaction, and returns key as stored from then on: nil when absent.
// A transaction whose own outcome is lost is sent again (creating the
// fence twice is harmless) until ctx ends.
func (f *Fence) Close(ctx context.Context, c *clientv3.Client, key string) (*mvccpb.KeyValue, error) {
	var (
		last  error
		lease clientv3.LeaseID // granted once, kept across attempts
	)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		kv, err := f.closeOnce(ctx, c, key, &lease)
		if err == nil {
			return kv, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("close fence %s of %s: %w", f.key, key, last)
		case <-time.After(delay):
		}
	}
}

// closeOnce is one attempt of Close; *lease is granted on the first attempt
// that reaches etcd and reused by the later ones.
func (f *Fence) closeOnce(ctx context.Context, c *clientv3.Client, key string, lease *clientv3.LeaseID) (*mvccpb.KeyValue, error) {
	if *lease == clientv3.NoLease {
		granted, err := c.Grant(ctx, int64(Lifetime/time.Second))
		if err != nil {
			return nil, fmt.Errorf("grant the fence's lease: %w", err)
		}
		*lease = granted.ID
	}
	resp, err := c.Txn(ctx).Then(
		clientv3.OpPut(f.key, "", clientv3.WithLease(*lease)), // no write of the request applies from here on
		clientv3.OpGet(key), // what they left, at the same revision
	).Commit()
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != 2 {
		return nil, fmt.Errorf("fence transaction answered %d results, want 2", len(resp.Responses))
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0], nil
	}
	return nil, nil
}

// Guard returns c's storage interface with every OptimisticPut and
// OptimisticDelete made under a context carrying a Fence conditional on the
// fence's absence; other calls, and writes without a fence, are c's own.
func Guard(c *kubernetes.Client) kubernetes.Interface {
	return guarded{Interface: c, kv: c.KV}
}

type guarded struct {
	kubernetes.Interface
	kv clientv3.KV
}

func (g guarded) OptimisticPut(ctx context.Context, key string, value []byte, expectedRevision int64, opts kubernetes.PutOptions) (kubernetes.PutResponse, error) {
	f := FromContext(ctx)
	if f == nil {
		return g.Interface.OptimisticPut(ctx, key, value, expectedRevision, opts)
	}
	var resp kubernetes.PutResponse
	txn, err := g.commit(ctx, f, key, expectedRevision, opts.GetOnFailure,
		clientv3.OpPut(key, string(value), clientv3.WithLease(opts.LeaseID)))
	if err != nil {
		return resp, err
	}
	resp.Succeeded, resp.Revision, resp.KV = txn.succeeded, txn.revision, txn.kv
	return resp, nil
}

func (g guarded) OptimisticDelete(ctx context.Context, key string, expectedRevision int64, opts kubernetes.DeleteOptions) (kubernetes.DeleteResponse, error) {
	f := FromContext(ctx)
	if f == nil {
		return g.Interface.OptimisticDelete(ctx, key, expectedRevision, opts)
	}
	var resp kubernetes.DeleteResponse
	txn, err := g.commit(ctx, f, key, expectedRevision, opts.GetOnFailure, clientv3.OpDelete(key))
	if err != nil {
		return resp, err
	}
	resp.Succeeded, resp.Revision, resp.KV = txn.succeeded, txn.revision, txn.kv
	return resp, nil
}

// txnResult is what a guarded write answers, as the store reads it.
type txnResult struct {
	succeeded bool
	revision  int64
	kv        *mvccpb.KeyValue // the key as stored, when the compare failed and it was asked for
}

// commit runs op on key if key's ModRevision is expectedRevision (0: absent)
// and f is open: the transaction of kubernetes.Client's optimistic writes
// with one compare more.
func (g guarded) commit(ctx context.Context, f *Fence, key string, expectedRevision int64, getOnFailure bool, op clientv3.Op) (txnResult, error) {
	orElse := []clientv3.Op{clientv3.OpGet(f.key, clientv3.WithCountOnly())} // why the compare failed
	if getOnFailure {
		orElse = append(orElse, clientv3.OpGet(key)) // the fresh state the store retries on
	}
	resp, err := g.kv.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", expectedRevision), // the store's own compare
		clientv3.Compare(clientv3.CreateRevision(f.key), "=", 0),           // the fence is open
	).Then(op).Else(orElse...).Commit()
	if err != nil {
		return txnResult{}, err
	}
	r := txnResult{succeeded: resp.Succeeded, revision: resp.Header.Revision}
	if resp.Succeeded {
		return r, nil
	}
	if len(resp.Responses) != len(orElse) {
		return txnResult{}, fmt.Errorf("write of %s answered %d results, want %d", key, len(resp.Responses), len(orElse))
	}
	if resp.Responses[0].GetResponseRange().GetCount() > 0 {
		return txnResult{}, fmt.Errorf("write of %s: %w", key, ErrFenced)
	}
	if getOnFailure {
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
			r.kv = kvs[0]
		}
	}
	return r, nil
}
