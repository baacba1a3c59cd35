package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// guardedClient is a store's storage client on c, guarded as the Services'
// store is.
func guardedClient(c *clientv3.Client) kubernetes.Interface {
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	return Guard(kc)
}

// TestGuardedWrites: writes without a fence are the client's own; writes
// under an open fence succeed and lose compares as the store expects (the
// fresh state returned on request); once the fence is closed, every write
// under it is refused with ErrFenced, never reported as a lost compare, and
// Close returns the key as stored (nil when absent).
func TestGuardedWrites(t *testing.T) {
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

	kv, err := f.Close(ctx, c, key)
	if err != nil {
		t.Fatal(err)
	}
	if kv == nil || string(kv.Value) != "v2" || kv.ModRevision != updated {
		t.Fatalf("Close read %v, want v2 at revision %d", kv, updated)
	}
	// Closed: the same writes are refused, whatever their compare.
	if _, err := k.OptimisticPut(fctx, key, []byte("v3"), updated, kubernetes.PutOptions{GetOnFailure: true}); !errors.Is(err, ErrFenced) {
		t.Errorf("update after Close: %v, want ErrFenced", err)
	}
	if _, err := k.OptimisticDelete(fctx, key, updated, kubernetes.DeleteOptions{GetOnFailure: true}); !errors.Is(err, ErrFenced) {
		t.Errorf("delete after Close: %v, want ErrFenced", err)
	}
	if _, err := k.OptimisticPut(fctx, "/registry/services/specs/default/other", []byte("v1"), 0, kubernetes.PutOptions{}); !errors.Is(err, ErrFenced) {
		t.Errorf("create after Close: %v, want ErrFenced", err)
	}
	got, err := c.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v2" {
		t.Fatalf("after the refused writes %s is %v (%v), want v2", key, got.Kvs, err)
	}
	// Another request's fence is its own.
	other := NewContext(ctx, New(layout))
	if del, err := k.OptimisticDelete(other, key, updated, kubernetes.DeleteOptions{}); err != nil || !del.Succeeded {
		t.Fatalf("delete under another, open fence: %+v, %v", del, err)
	}

	// Close of a key never written reads nothing; the fence outlives the
	// request by its lease.
	absent := New(layout)
	kv, err = absent.Close(ctx, c, "/registry/services/specs/default/never")
	if err != nil || kv != nil {
		t.Fatalf("Close of an absent key: %v, %v", kv, err)
	}
	fk, err := c.Get(ctx, absent.Key())
	if err != nil || len(fk.Kvs) != 1 {
		t.Fatalf("fence key %s after Close: %v, %v", absent.Key(), fk, err)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(fk.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL < int64((Lifetime-time.Minute)/time.Second) {
		t.Errorf("fence lease TTL %d s, want about %v", ttl.TTL, Lifetime)
	}
}

// TestCloseGivesUpWithItsContext: with etcd gone, Close retries until its
// context ends and says so.
func TestCloseGivesUpWithItsContext(t *testing.T) {
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	etcd.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := New(etcdlayout.Layout{}).Close(ctx, c, "/registry/services/specs/default/web"); err == nil {
		t.Fatal("Close with etcd stopped succeeded")
	}
}

// TestLateWriteFenced: a write whose caller gave up while a slow connection
// still carried it lands later (the control), unless its fence is closed
// first: then it never lands, and Close's read (absent) stays true. The
// write goes to etcd through a proxy that delays every byte sent to the
// member by 1.5 s; Close and the checks go direct.
func TestLateWriteFenced(t *testing.T) {
	const delay = 1500 * time.Millisecond
	etcd := etcdtest.New(t)
	direct := etcd.NewClient(t)
	proxy, err := faultproxy.Start(strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	slow, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	k := guardedClient(slow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := slow.Put(ctx, "/warm", "1"); err != nil { // connected before the fault
		t.Fatal(err)
	}
	proxy.Set(faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget})
	defer proxy.Set(faultproxy.Fault{})

	for _, closeFence := range []bool{false, true} {
		key := fmt.Sprintf("/registry/services/specs/default/late-%v", closeFence)
		f := New(etcdlayout.Layout{})
		short, giveUp := context.WithTimeout(NewContext(ctx, f), 300*time.Millisecond)
		sent := time.Now()
		_, err := k.OptimisticPut(short, key, []byte("v1"), 0, kubernetes.PutOptions{})
		giveUp()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("write through the slow connection: %v, want the caller's deadline", err)
		}
		if closeFence {
			kv, err := f.Close(ctx, direct, key)
			if err != nil || kv != nil {
				t.Fatalf("Close right after the timeout read %v, %v; want absent", kv, err)
			}
		}
		// Wait past the delay, then until etcd answers through the proxy
		// (every byte sent before has arrived).
		time.Sleep(time.Until(sent.Add(2 * delay)))
		if _, err := slow.Get(ctx, "/warm"); err != nil {
			t.Fatal(err)
		}
		got, err := direct.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		switch landed := len(got.Kvs) > 0; {
		case closeFence && landed:
			t.Errorf("the write landed %v after its fence was closed", time.Since(sent).Round(time.Millisecond))
		case !closeFence && !landed:
			t.Errorf("control: the write the caller gave up on never landed; the test checks nothing")
		}
	}
}
