package fence

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/allocator/allocator/internal/etcdhistory"
	"github.com/allocator/allocator/internal/etcdquota"
)

// Guard returns c's storage interface with every OptimisticPut and
// OptimisticDelete made under a context carrying a Fence conditional on the
// fence's absence and marked (doc.go), with a lease from l; other calls,
// and writes without a fence, are c's own.
func Guard(c *kubernetes.Client, l *Leases) kubernetes.Interface {
	return guarded{Interface: c, kv: c.KV, leases: l}
}

// GuardClaims is Guard for a store whose objects are claims: each object is
// the reservation it stands for, and each create writes a value no other
// write makes (the object's metadata.uid is generated for that create). A
// create under a fence is conditional on the fence's absence as any guarded
// write, but carries no marker: the value Close reads tells whether it was
// stored, and a claim is held only while its object is there. Close answers
// such a create Landed only when the key still holds what it wrote; one
// applied and since changed or deleted reads as not landed, which a claim
// may take as failed (its object is not, or no longer, its reservation).
// Its other writes are marked as Guard's.
func GuardClaims(c *kubernetes.Client, l *Leases) kubernetes.Interface {
	return guarded{Interface: c, kv: c.KV, leases: l, claims: true}
}

type guarded struct {
	kubernetes.Interface
	kv     clientv3.KV
	leases *Leases
	claims bool // creates are claims, known by their value (GuardClaims)
}

func (g guarded) OptimisticPut(ctx context.Context, key string, value []byte, expectedRevision int64, opts kubernetes.PutOptions) (kubernetes.PutResponse, error) {
	f := FromContext(ctx)
	if f == nil {
		return g.Interface.OptimisticPut(ctx, key, value, expectedRevision, opts)
	}
	var resp kubernetes.PutResponse
	v := string(value)
	var claim *string // the value a claim is known by
	if g.claims && expectedRevision == 0 {
		claim = &v
	}
	txn, err := g.commit(ctx, f, key, expectedRevision, opts.GetOnFailure, claim,
		clientv3.OpPut(key, v, clientv3.WithLease(opts.LeaseID)))
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
	txn, err := g.commit(ctx, f, key, expectedRevision, opts.GetOnFailure, nil, clientv3.OpDelete(key))
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
// and f is open, creating the write's marker with it: the transaction of
// kubernetes.Client's optimistic writes with one compare and one put more.
// A claim (not nil: the value it writes, GuardClaims) has the compare and no
// marker.
//   - A write refused because the request's lease is gone was not applied;
//     it is sent once more with a new lease when no earlier write of the
//     request is still unknown.
//   - etcd answers "database space exceeded" once it has applied or refused
//     the write, so the marker (a claim's key), read then, tells which: a
//     write applied is answered as such. A delete refused that way is sent
//     once more without a marker: a put makes a transaction cost space, and
//     etcd out of space still applies deletes, which is how an operator
//     makes room. Such a write, if its answer is lost, cannot be told apart
//     later (Close).
func (g guarded) commit(ctx context.Context, f *Fence, key string, expectedRevision int64, getOnFailure bool, claim *string, op clientv3.Op) (txnResult, error) {
	marked := true
	for retried := false; ; retried = true {
		w, err := f.begin(ctx, g.leases, marked && claim == nil)
		if err != nil {
			return txnResult{}, fmt.Errorf("write of %s: %w", key, err)
		}
		w.expected, w.delete = expectedRevision, op.IsDelete()
		if claim != nil {
			w.claim, w.value = true, *claim
		}
		r, err := g.commitOnce(ctx, f, key, w, getOnFailure, op)
		switch {
		case err == nil:
			return r, nil
		case etcdquota.Exceeded(err) && marked:
			rev, landed, rerr := g.storedDespite(ctx, key, w)
			if rerr != nil {
				return r, err // still unknown
			}
			if landed {
				w.outcome = applied
				f.record(key, w)
				return txnResult{succeeded: true, revision: rev}, nil
			}
			w.outcome = refused
			f.record(key, w)
			if retried || !op.IsDelete() {
				return r, err
			}
			marked = false
		case leaseGone(err):
			g.leases.forget(w.lease)
			if retried || !f.renewLease(w.lease) {
				return r, fmt.Errorf("write of %s: %w", key, err)
			}
		default:
			return r, err
		}
	}
}

// storedDespite reads whether w, a write of key that etcd answered with an
// error once it had applied or refused it, was applied, and at which
// revision: from its marker, or, for a claim, from key holding its value.
func (g guarded) storedDespite(ctx context.Context, key string, w write) (int64, bool, error) {
	if w.claim {
		resp, err := g.kv.Get(ctx, key)
		if err != nil {
			return 0, false, err
		}
		if kv := first(resp.Kvs); kv != nil && string(kv.Value) == w.value {
			return kv.ModRevision, true, nil
		}
		return 0, false, nil
	}
	resp, err := g.kv.Get(ctx, w.marker)
	if err != nil {
		return 0, false, err
	}
	if kv := first(resp.Kvs); kv != nil {
		return kv.CreateRevision, true, nil
	}
	return 0, false, nil
}

func (g guarded) commitOnce(ctx context.Context, f *Fence, key string, w write, getOnFailure bool, op clientv3.Op) (txnResult, error) {
	orElse := []clientv3.Op{clientv3.OpGet(f.key, clientv3.WithCountOnly())} // why the compare failed
	if getOnFailure {
		orElse = append(orElse, clientv3.OpGet(key)) // the fresh state the store retries on
	}
	then := []clientv3.Op{op}
	if w.marker != "" {
		then = append(then, clientv3.OpPut(w.marker, "", clientv3.WithLease(w.lease))) // this write was applied
	}
	resp, err := g.kv.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", w.expected), // the store's own compare
		clientv3.Compare(clientv3.CreateRevision(f.key), "=", 0),     // the fence is open
	).Then(then...).Else(orElse...).Commit()
	if err != nil {
		if leaseGone(err) || errors.Is(err, etcdhistory.ErrRestored) {
			w.outcome = refused // etcd refused the whole transaction
		} else {
			w.outcome = unknown
		}
		f.record(key, w)
		return txnResult{}, err
	}
	r := txnResult{succeeded: resp.Succeeded, revision: resp.Header.Revision}
	if resp.Succeeded {
		w.outcome = applied
		f.record(key, w)
		return r, nil
	}
	w.outcome = refused
	f.record(key, w)
	if len(resp.Responses) != len(orElse) {
		return txnResult{}, fmt.Errorf("write of %s answered %d results, want %d", key, len(resp.Responses), len(orElse))
	}
	if resp.Responses[0].GetResponseRange().GetCount() > 0 {
		return txnResult{}, &fencedError{key: key}
	}
	if getOnFailure {
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
			r.kv = kvs[0]
		}
	}
	return r, nil
}
