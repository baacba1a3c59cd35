package etcdhistory

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Guard returns kv with every write made conditional on etcd's history
// going on from what m last confirmed: each transaction, put and delete also
// compares the marker's version with the version Watch last confirmed (it
// can only be higher while the history goes on; a restore to any point
// before that confirmation leaves it lower, or the key absent). A write
// that fails that compare is answered with an error wrapping ErrRestored,
// never a lost compare-and-swap, so no retry loop spins on it; the restore
// is reported through Restored at once. Reads are kv's own. Before the
// marker's first write nothing is compared.
func (m *Marker) Guard(kv clientv3.KV) clientv3.KV {
	return guardedKV{KV: kv, m: m}
}

type guardedKV struct {
	clientv3.KV
	m *Marker
}

func (g guardedKV) Txn(ctx context.Context) clientv3.Txn {
	return &guardedTxn{ctx: ctx, g: g}
}

func (g guardedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	resp, err := g.Do(ctx, clientv3.OpPut(key, val, opts...))
	if err != nil {
		return nil, err
	}
	return resp.Put(), nil
}

func (g guardedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	resp, err := g.Do(ctx, clientv3.OpDelete(key, opts...))
	if err != nil {
		return nil, err
	}
	return resp.Del(), nil
}

// Do sends a put or delete as a guarded transaction of its own, and a
// transaction guarded; a read is kv's own.
func (g guardedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if op.IsGet() || g.m.confirmed.Load() == 0 {
		return g.KV.Do(ctx, op)
	}
	if op.IsTxn() {
		cmps, then, orElse := op.Txn()
		resp, err := g.Txn(ctx).If(cmps...).Then(then...).Else(orElse...).Commit()
		if err != nil {
			return clientv3.OpResponse{}, err
		}
		return resp.OpResponse(), nil
	}
	resp, err := g.Txn(ctx).Then(op).Commit()
	if err != nil {
		return clientv3.OpResponse{}, err
	}
	return opResponse(resp, op), nil
}

// opResponse is the answer of op, sent alone in the transaction resp
// answers, as op's own answer.
func opResponse(resp *clientv3.TxnResponse, op clientv3.Op) clientv3.OpResponse {
	r := resp.Responses[0]
	if op.IsPut() {
		put := r.GetResponsePut()
		put.Header = resp.Header
		return (*clientv3.PutResponse)(put).OpResponse()
	}
	del := r.GetResponseDeleteRange()
	del.Header = resp.Header
	return (*clientv3.DeleteResponse)(del).OpResponse()
}

// guardedTxn gathers a transaction and sends it with the marker's compare.
type guardedTxn struct {
	ctx          context.Context
	g            guardedKV
	cmps         []clientv3.Cmp
	then, orElse []clientv3.Op
}

func (t *guardedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *guardedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.then = append(t.then, ops...)
	return t
}

func (t *guardedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.orElse = append(t.orElse, ops...)
	return t
}

func (t *guardedTxn) Commit() (*clientv3.TxnResponse, error) {
	m := t.g.m
	confirmed := m.confirmed.Load()
	txn := t.g.KV.Txn(t.ctx)
	if confirmed == 0 {
		return txn.If(t.cmps...).Then(t.then...).Else(t.orElse...).Commit()
	}
	resp, err := txn.If(append(t.cmps,
		clientv3.Compare(clientv3.Version(m.key), ">", confirmed-1), // etcd's history went on from what the marker last confirmed
	)...).Then(t.then...).Else(append(t.orElse,
		clientv3.OpGet(m.key, clientv3.WithKeysOnly()), // why a compare failed: this one, or the caller's
	)...).Commit()
	if err != nil || resp.Succeeded {
		return resp, err
	}
	last := len(resp.Responses) - 1
	marker := first(resp.Responses[last].GetResponseRange().GetKvs())
	if marker == nil || marker.Version < confirmed {
		var version int64
		if marker != nil {
			version = marker.Version
		}
		err := fmt.Errorf("%w: write of %s refused: this server's marker at %s is at version %d (0: gone), it wrote version %d",
			ErrRestored, t.key(), m.key, version, confirmed)
		m.report(err)
		return nil, err
	}
	resp.Responses = resp.Responses[:last]
	return resp, nil
}

// key names the transaction's first write, for its error.
func (t *guardedTxn) key() string {
	for _, op := range t.then {
		if op.IsPut() || op.IsDelete() {
			return string(op.KeyBytes())
		}
	}
	return "a transaction"
}
