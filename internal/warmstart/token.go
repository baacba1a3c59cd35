package warmstart

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrStale is returned by Token.Check for a File that does not describe
// the etcd it would be used with.
var ErrStale = errors.New("warm-start file does not match etcd")

// Token names the write a shutdown made in etcd beside its Files: a random
// ID put at one key, and the revision of that put.
type Token struct {
	ID       string
	Revision int64
}

// Mark puts a new Token's ID at key. The shutdown calls it after its
// informers stopped, so the Token's revision follows every version its
// Files are at.
func Mark(ctx context.Context, kv clientv3.KV, key string) (Token, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Token{}, fmt.Errorf("warm-start mark: %w", err)
	}
	id := hex.EncodeToString(b[:])
	resp, err := kv.Put(ctx, key, id)
	if err != nil {
		return Token{}, fmt.Errorf("warm-start mark: put %s: %w", key, err)
	}
	return Token{ID: id, Revision: resp.Header.Revision}, nil
}

// Check returns nil when a File of t at resourceVersion may be used with
// the etcd behind kv: key holds t's ID, written at t's revision (the same
// history as the shutdown's, not a restore from before it), and etcd still
// answers at resourceVersion (not compacted, so a watch from it sees every
// change since). Otherwise an error wrapping ErrStale says why.
func (t Token) Check(ctx context.Context, kv clientv3.KV, key, resourceVersion string) error {
	rv, err := strconv.ParseInt(resourceVersion, 10, 64)
	if err != nil || rv <= 0 || rv > t.Revision {
		return fmt.Errorf("%w: resource version %q is not one before the mark's revision %d", ErrStale, resourceVersion, t.Revision)
	}
	resp, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("warm-start check: get %s: %w", key, err)
	}
	switch {
	case len(resp.Kvs) == 0:
		return fmt.Errorf("%w: etcd holds no mark at %s", ErrStale, key)
	case string(resp.Kvs[0].Value) != t.ID || resp.Kvs[0].ModRevision != t.Revision:
		return fmt.Errorf("%w: etcd's mark is %q at revision %d, the file's %q at %d",
			ErrStale, resp.Kvs[0].Value, resp.Kvs[0].ModRevision, t.ID, t.Revision)
	}
	if _, err := kv.Get(ctx, key, clientv3.WithRev(rv), clientv3.WithCountOnly()); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return fmt.Errorf("%w: etcd compacted past resource version %d", ErrStale, rv)
		}
		return fmt.Errorf("warm-start check: read at revision %d: %w", rv, err)
	}
	return nil
}
