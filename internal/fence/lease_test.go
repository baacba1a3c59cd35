package fence

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestLeasesInFlight: a lease is registered before a write carries it, so
// InFlight lists it while a request holds it; it is revoked (and no longer
// listed) once the last request holding it is Done after its reuse window,
// and not before; a request still holding an older lease keeps that one
// alive while new requests take a new one.
func TestLeasesInFlight(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	c := etcd.NewClient(t)
	layout := etcdlayout.Layout{Prefix: "/registry"}
	leases := NewLeases(c, layout, 0)
	leases.reuse = 500 * time.Millisecond
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	k := Guard(kc, leases)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inFlight := InFlight{KV: c.KV, Layout: layout}
	alive := func() []string {
		t.Helper()
		names, err := inFlight.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	write := func(f *Fence, key string) {
		t.Helper()
		if put, err := k.OptimisticPut(NewContext(ctx, f), key, []byte("v"), 0, kubernetes.PutOptions{}); err != nil || !put.Succeeded {
			t.Fatalf("write %s: %+v, %v", key, put, err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
		}
	}

	if got := alive(); len(got) != 0 {
		t.Fatalf("before any write: %v alive, want none", got)
	}
	first, second := New(layout), New(layout)
	write(first, "/registry/services/specs/default/a")
	write(second, "/registry/services/specs/default/b")
	if first.lease != second.lease {
		t.Fatalf("two requests within the window got leases %x and %x, want one", first.lease, second.lease)
	}
	held := LeaseName(first.lease)
	if got := alive(); !slices.Equal(got, []string{held}) {
		t.Fatalf("while two requests hold it: %v alive, want [%s]", got, held)
	}

	// Past the window, a new request takes a new lease; the old one stays
	// while first holds it.
	time.Sleep(leases.reuse)
	second.Done()
	third := New(layout)
	write(third, "/registry/services/specs/default/c")
	if third.lease == first.lease {
		t.Fatal("a request after the window was given the old lease")
	}
	next := LeaseName(third.lease)
	if got := alive(); !slices.Contains(got, held) || !slices.Contains(got, next) {
		t.Fatalf("with first still holding the old lease: %v alive, want %s and %s", got, held, next)
	}

	// The last holder's Done revokes the old lease at once; the current one
	// goes when its window has closed.
	first.Done()
	waitFor("the old lease revoked after its last holder's Done", func() bool { return !slices.Contains(alive(), held) })
	third.Done()
	waitFor("the current lease revoked once its window closed", func() bool { return len(alive()) == 0 })

	// A request that takes a lease after Done is refused: a Done request
	// writes no more.
	if _, err := k.OptimisticPut(NewContext(ctx, third), "/registry/services/specs/default/d", []byte("v"), 0, kubernetes.PutOptions{}); err == nil {
		t.Error("a write under a fence that is Done was sent")
	}
}
