package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// testLeases are write leases on c given out for as long as they live, so
// that a test's requests after a fault is set take the lease granted
// before it.
func testLeases(c *clientv3.Client) *Leases {
	l := NewLeases(c, etcdlayout.Layout{}, 0)
	l.reuse = l.ttl
	return l
}

// guardedClient is a store's storage client on c, guarded as the Services'
// store is.
func guardedClient(c *clientv3.Client) kubernetes.Interface {
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	return Guard(kc, testLeases(c))
}

// claimsClient is a store's storage client on c, guarded as the
// IPAddresses' store is.
func claimsClient(c *clientv3.Client) kubernetes.Interface {
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	return GuardClaims(kc, testLeases(c))
}

// TestGuardedWrites: writes without a fence are the client's own; writes
// under an open fence succeed and lose compares as the store expects (the
// fresh state returned on request), and each applied one leaves a marker;
// when every answer came back, Close says the outcome from its record,
// fences nothing, and the request may go on writing.
func TestGuardedWrites(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	k := guardedClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	layout := etcdlayout.Layout{}

	// No fence: a plain create.
	put, err := k.OptimisticPut(ctx, "/registry/services/specs/default/plain", []byte("v1"), 0, kubernetes.PutOptions{})
	if err != nil || !put.Succeeded {
		t.Fatalf("create without a fence: %+v, %v", put, err)
	}

	f := New(layout)
	fctx := NewContext(ctx, f)
	key := "/registry/services/specs/default/web"
	put, err = k.OptimisticPut(fctx, key, []byte("v1"), 0, kubernetes.PutOptions{})
	if err != nil || !put.Succeeded {
		t.Fatalf("create under an open fence: %+v, %v", put, err)
	}
	created := put.Revision
	// A lost compare under an open fence is the store's: not succeeded,
	// with the fresh state when asked.
	put, err = k.OptimisticPut(fctx, key, []byte("v2"), created-1, kubernetes.PutOptions{GetOnFailure: true})
	if err != nil || put.Succeeded || put.KV == nil || string(put.KV.Value) != "v1" {
		t.Fatalf("update with a stale revision under an open fence: %+v, %v", put, err)
	}
	put, err = k.OptimisticPut(fctx, key, []byte("v2"), created, kubernetes.PutOptions{})
	if err != nil || !put.Succeeded {
		t.Fatalf("update under an open fence: %+v, %v", put, err)
	}
	updated := put.Revision

	o, err := f.Close(ctx, c, key)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Landed || o.Current == nil || string(o.Current.Value) != "v2" || o.Current.ModRevision != updated {
		t.Fatalf("Close answered %+v, want landed, v2 at revision %d", o, updated)
	}
	// Every answer came back: Close fenced nothing, and the request may go
	// on writing (a delete that retries after a stale read does).
	if fk, err := c.Get(ctx, f.Key()); err != nil || len(fk.Kvs) != 0 {
		t.Fatalf("fence key %s after a Close with every answer known: %v, %v", f.Key(), fk, err)
	}
	if del, err := k.OptimisticDelete(fctx, key, updated, kubernetes.DeleteOptions{}); err != nil || !del.Succeeded {
		t.Fatalf("delete after a Close with every answer known: %+v, %v", del, err)
	}

	// Each applied write's marker carries the request's lease, which lives
	// allocation.WriteLease.
	for _, k := range []string{f.Key() + "/w1", f.Key() + "/w3", f.Key() + "/w4"} {
		got, err := c.Get(ctx, k)
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("%s: %v, %v", k, got, err)
		}
		ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(got.Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL < int64((allocation.WriteLease-time.Minute)/time.Second) || ttl.TTL > int64(allocation.WriteLease/time.Second) {
			t.Errorf("%s: lease TTL %d s, want about %v", k, ttl.TTL, allocation.WriteLease)
		}
	}
	if got, err := c.Get(ctx, f.Key()+"/w2"); err != nil || len(got.Kvs) != 0 {
		t.Errorf("the marker of the write that lost its compare: %v, %v; want none", got, err)
	}

	// A claim is known by its value: it leaves no marker, and Close says
	// its outcome from the record, as for any write whose answer came back.
	// A claim's other writes are marked.
	claims := claimsClient(c)
	cf := New(layout)
	cctx := NewContext(ctx, cf)
	claimKey := "/registry/ipaddresses/10.0.0.9"
	if put, err := claims.OptimisticPut(cctx, claimKey, []byte("uid-9"), 0, kubernetes.PutOptions{}); err != nil || !put.Succeeded {
		t.Fatalf("claim under an open fence: %+v, %v", put, err)
	}
	if o, err := cf.Close(ctx, c, claimKey); err != nil || !o.Landed || o.Current == nil || string(o.Current.Value) != "uid-9" {
		t.Fatalf("Close of an answered claim: %+v, %v", o, err)
	}
	if got, err := c.Get(ctx, cf.Key()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || got.Count != 0 {
		t.Fatalf("markers of a claim: %v, %v; want none", got, err)
	}
	put, err = claims.OptimisticPut(cctx, claimKey, []byte("uid-9, changed"), 1, kubernetes.PutOptions{})
	if err != nil || put.Succeeded {
		t.Fatalf("an update with a stale revision: %+v, %v", put, err)
	}
	stored, err := c.Get(ctx, claimKey)
	if err != nil || len(stored.Kvs) != 1 {
		t.Fatal(stored, err)
	}
	if put, err := claims.OptimisticPut(cctx, claimKey, []byte("uid-9, changed"), stored.Kvs[0].ModRevision, kubernetes.PutOptions{}); err != nil || !put.Succeeded {
		t.Fatalf("an update of a claim under an open fence: %+v, %v", put, err)
	}
	if got, err := c.Get(ctx, cf.Key()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || got.Count != 1 {
		t.Fatalf("markers after a claim and its update: %v, %v; want the update's", got, err)
	}

	// A request that wrote nothing has nothing to fence: Close reads.
	none := New(layout)
	o, err = none.Close(ctx, c, "/registry/services/specs/default/never")
	if err != nil || o.Landed || o.Current != nil {
		t.Fatalf("Close of a request that wrote nothing: %+v, %v", o, err)
	}
	if fk, err := c.Get(ctx, none.Key()); err != nil || len(fk.Kvs) != 0 {
		t.Fatalf("fence key %s of a request that wrote nothing: %v, %v", none.Key(), fk, err)
	}
}

// TestStoredDespiteQuota: after etcd's "database space exceeded", which it
// answers once it has applied or refused the write, a marked write is known
// by its marker and a claim by its key holding the value it wrote.
func TestStoredDespiteQuota(t *testing.T) {
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := guarded{kv: c.KV}
	key, marker := "/registry/ipaddresses/10.0.0.7", "/registry/clusterip-allocator/fences/f/w1"
	put, err := c.Put(ctx, key, "uid-7")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, marker, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		w      write
		landed bool
	}{
		{"a claim whose value is stored", write{claim: true, value: "uid-7"}, true},
		{"a claim whose key holds another value", write{claim: true, value: "uid-8"}, false},
		{"a marked write whose marker is stored", write{marker: marker}, true},
		{"a marked write without its marker", write{marker: marker + "0"}, false},
	} {
		rev, landed, err := g.storedDespite(ctx, key, tc.w)
		if err != nil || landed != tc.landed || (landed && rev < put.Header.Revision) {
			t.Errorf("%s: revision %d, landed %v, %v; want landed %v", tc.name, rev, landed, err, tc.landed)
		}
	}
}

// TestCloseGivesUpWithItsContext: with etcd gone, Close retries until its
// context ends and says so.
func TestCloseGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	etcd.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := New(etcdlayout.Layout{}).Close(ctx, c, "/registry/services/specs/default/web"); err == nil {
		t.Fatal("Close with etcd stopped succeeded")
	}
}

// TestLostWrites: a write whose caller gave up while a slow connection still
// carried it gets its outcome from Close, exactly, whatever happened to the
// key since: landed and then deleted by another request, fenced before it
// could land (and then it never does), a delete that landed (and what it
// deleted), a lease gone before the write arrived (refused by etcd; Close
// says the outcome is lost). The writes go through a proxy that delays every
// byte sent to etcd by 1.5 s; Close and the checks go direct.
func TestLostWrites(t *testing.T) {
	t.Parallel()
	const delay = 1500 * time.Millisecond
	etcd := etcdtest.New(t)
	direct := etcd.NewClient(t)
	proxy, slow := etcd.Proxied(t)
	k := guardedClient(slow)
	claims := claimsClient(slow)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Connected, and the guards' leases granted, before the fault.
	if _, err := k.OptimisticPut(NewContext(ctx, New(etcdlayout.Layout{})), "/warm", []byte("1"), 0, kubernetes.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.OptimisticPut(NewContext(ctx, New(etcdlayout.Layout{})), "/warm-claims", []byte("1"), 0, kubernetes.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.Set(faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget})
	defer proxy.Set(faultproxy.Fault{})

	// lose sends write under f with a caller that gives up after 300 ms.
	lose := func(f *Fence, write func(ctx context.Context) error) time.Time {
		t.Helper()
		short, giveUp := context.WithTimeout(NewContext(ctx, f), 300*time.Millisecond)
		defer giveUp()
		sent := time.Now()
		if err := write(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("write through the slow connection: %v, want the caller's deadline", err)
		}
		return sent
	}
	// arrived waits until every byte sent through the proxy before sent+delay
	// has reached etcd and been answered.
	arrived := func(sent time.Time) {
		t.Helper()
		time.Sleep(time.Until(sent.Add(delay + 200*time.Millisecond)))
		if _, err := slow.Get(ctx, "/warm"); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(key string) *mvccpb.KeyValue {
		t.Helper()
		got, err := direct.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return first(got.Kvs)
	}
	create := func(key string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := k.OptimisticPut(ctx, key, []byte("v1"), 0, kubernetes.PutOptions{})
			return err
		}
	}

	t.Run("a create that landed and was deleted by another request", func(t *testing.T) {
		key := "/registry/services/specs/default/landed"
		f := New(etcdlayout.Layout{})
		arrived(lose(f, create(key)))
		if stored(key) == nil {
			t.Fatal("control: the write the caller gave up on never landed; the case checks nothing")
		}
		if _, err := direct.Delete(ctx, key); err != nil { // another request
			t.Fatal(err)
		}
		o, err := f.Close(ctx, direct, key)
		if err != nil || !o.Landed || o.Delete || o.Current != nil {
			t.Fatalf("Close: %+v, %v; want a put landed, absent now", o, err)
		}
	})

	t.Run("a create fenced before it could land", func(t *testing.T) {
		key := "/registry/services/specs/default/fenced"
		f := New(etcdlayout.Layout{})
		sent := lose(f, create(key))
		o, err := f.Close(ctx, direct, key)
		if err != nil || o.Landed || o.Current != nil {
			t.Fatalf("Close right after the timeout: %+v, %v; want not landed, absent", o, err)
		}
		arrived(sent)
		if kv := stored(key); kv != nil {
			t.Errorf("the write landed %v after its fence was closed", time.Since(sent).Round(time.Millisecond))
		}
		// Closed: every later write of the request is refused, answered
		// with an API status (504), not an unstructured 500.
		_, err = k.OptimisticPut(NewContext(ctx, f), key, []byte("v2"), 0, kubernetes.PutOptions{GetOnFailure: true})
		if !errors.Is(err, ErrFenced) {
			t.Errorf("a write after Close: %v, want ErrFenced", err)
		}
		if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != 504 || !strings.Contains(status.Status().Message, key) {
			t.Errorf("a write after Close: %#v, want an API status 504 naming %s", err, key)
		}
	})

	t.Run("a delete that landed", func(t *testing.T) {
		key := "/registry/services/specs/default/deleted"
		put, err := direct.Put(ctx, key, "v1")
		if err != nil {
			t.Fatal(err)
		}
		f := New(etcdlayout.Layout{})
		arrived(lose(f, func(ctx context.Context) error {
			_, err := k.OptimisticDelete(ctx, key, put.Header.Revision, kubernetes.DeleteOptions{})
			return err
		}))
		o, err := f.Close(ctx, direct, key)
		if err != nil || !o.Landed || !o.Delete || o.Current != nil {
			t.Fatalf("Close: %+v, %v; want a delete landed, absent", o, err)
		}
		old, err := f.Replaced(ctx, direct, key)
		if err != nil || old == nil || string(old.Value) != "v1" {
			t.Fatalf("Replaced: %v, %v; want v1", old, err)
		}
	})

	claim := func(key, value string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := claims.OptimisticPut(ctx, key, []byte(value), 0, kubernetes.PutOptions{})
			return err
		}
	}
	// markers counts the markers under f.
	markers := func(f *Fence) int64 {
		t.Helper()
		got, err := direct.Get(ctx, f.Key()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return got.Count
	}

	t.Run("a claim that landed", func(t *testing.T) {
		key := "/registry/ipaddresses/10.0.0.1"
		f := New(etcdlayout.Layout{})
		arrived(lose(f, claim(key, "uid-1")))
		o, err := f.Close(ctx, direct, key)
		if err != nil || !o.Landed || o.Current == nil || string(o.Current.Value) != "uid-1" {
			t.Fatalf("Close: %+v, %v; want landed, stored", o, err)
		}
		if n := markers(f); n != 0 {
			t.Errorf("a claim left %d markers, want none", n)
		}
	})

	t.Run("a claim that landed and was replaced by another request's", func(t *testing.T) {
		key := "/registry/ipaddresses/10.0.0.2"
		f := New(etcdlayout.Layout{})
		arrived(lose(f, claim(key, "uid-2")))
		if stored(key) == nil {
			t.Fatal("control: the claim the caller gave up on never landed; the case checks nothing")
		}
		if _, err := direct.Delete(ctx, key); err != nil { // a release
			t.Fatal(err)
		}
		if _, err := direct.Put(ctx, key, "uid-3"); err != nil { // another request's claim
			t.Fatal(err)
		}
		o, err := f.Close(ctx, direct, key)
		if err != nil || o.Landed || o.Current == nil || string(o.Current.Value) != "uid-3" {
			t.Fatalf("Close: %+v, %v; want not landed (the key is no longer its claim), the other claim stored", o, err)
		}
	})

	t.Run("a claim fenced before it could land", func(t *testing.T) {
		key := "/registry/ipaddresses/10.0.0.4"
		f := New(etcdlayout.Layout{})
		sent := lose(f, claim(key, "uid-4"))
		o, err := f.Close(ctx, direct, key)
		if err != nil || o.Landed || o.Current != nil {
			t.Fatalf("Close right after the timeout: %+v, %v; want not landed, absent", o, err)
		}
		arrived(sent)
		if kv := stored(key); kv != nil {
			t.Errorf("the claim landed %v after its fence was closed", time.Since(sent).Round(time.Millisecond))
		}
	})

	t.Run("a lease gone before the write arrived", func(t *testing.T) {
		key := "/registry/services/specs/default/expired"
		f := New(etcdlayout.Layout{})
		sent := lose(f, create(key))
		if _, err := direct.Revoke(ctx, f.lease); err != nil { // what expiry does
			t.Fatal(err)
		}
		arrived(sent)
		if kv := stored(key); kv != nil {
			t.Fatal("a write landed with a lease etcd no longer had")
		}
		if _, err := f.Close(ctx, direct, key); !errors.Is(err, ErrOutcomeLost) {
			t.Fatalf("Close after the lease was revoked: %v, want ErrOutcomeLost", err)
		}
		// The next request is given the revoked lease, is refused, and is
		// sent again with a new one.
		proxy.Set(faultproxy.Fault{})
		next := New(etcdlayout.Layout{})
		if put, err := k.OptimisticPut(NewContext(ctx, next), key, []byte("v2"), 0, kubernetes.PutOptions{}); err != nil || !put.Succeeded {
			t.Fatalf("a write after the lease was revoked: %+v, %v", put, err)
		}
		if next.lease == f.lease {
			t.Error("the write after the revoke kept the revoked lease")
		}
	})
}
