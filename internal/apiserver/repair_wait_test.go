package apiserver

import (
	"context"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestAfterFirstRepairPass: the work readiness does not wait for starts
// once the ClusterIP repair's first pass is done, or after the bound when
// that pass never comes (a repair failing for good), and not at all once
// the server stops.
func TestAfterFirstRepairPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	passed := &Server{repairFirstPass: make(chan struct{})}
	close(passed.repairFirstPass)
	start := time.Now()
	if !passed.afterFirstRepairPass(ctx, time.Hour) || time.Since(start) > 5*time.Second {
		t.Errorf("after the first pass: did not go on at once (%v)", time.Since(start))
	}

	never := &Server{repairFirstPass: make(chan struct{})}
	start = time.Now()
	if !never.afterFirstRepairPass(ctx, 50*time.Millisecond) {
		t.Error("no first pass: did not go on after the bound")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("no first pass: went on after %v, before the 50 ms bound", waited)
	}

	stopped, stop := context.WithCancel(ctx)
	stop()
	if never.afterFirstRepairPass(stopped, time.Hour) {
		t.Error("server stopped: the work would still start")
	}
}

// syncingInformer is a Service informer that has synced once synced is
// closed.
type syncingInformer struct {
	cache.SharedIndexInformer
	synced chan struct{}
}

func (i syncingInformer) HasSynced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// TestAfterServiceInformerSync: the node-port repair's first pass waits for
// the Service informer to sync (a pass before it would list every
// Service), goes on at once without one, and not at all once the server
// stops.
func TestAfterServiceInformerSync(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if !(&Server{}).afterServiceInformerSync(ctx) {
		t.Error("no Service informer: did not go on")
	}

	inf := syncingInformer{synced: make(chan struct{})}
	s := &Server{serviceInformer: inf}
	done := make(chan bool, 1)
	go func() { done <- s.afterServiceInformerSync(ctx) }()
	select {
	case <-done:
		t.Fatal("went on before the informer synced")
	case <-time.After(300 * time.Millisecond):
	}
	close(inf.synced)
	select {
	case ok := <-done:
		if !ok {
			t.Error("informer synced: would not go on")
		}
	case <-ctx.Done():
		t.Fatal("informer synced: still waiting")
	}

	stopped, stop := context.WithCancel(ctx)
	stop()
	if (&Server{serviceInformer: syncingInformer{synced: make(chan struct{})}}).afterServiceInformerSync(stopped) {
		t.Error("server stopped: the work would still start")
	}
}

// TestAwaitVersion: the wait for an informer to hold an object at a
// resourceVersion goes on once the store holds it at that version or a
// later one, not before, and gives up after its bound.
func TestAwaitVersion(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	at := func(rv string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", ResourceVersion: rv}}
	}
	if err := awaitVersion(ctx, store, "kubernetes", "", 100*time.Millisecond); err == nil {
		t.Error("an absent object was waited for successfully")
	}
	if err := store.Add(at("9")); err != nil {
		t.Fatal(err)
	}
	if err := awaitVersion(ctx, store, "kubernetes", "10", 100*time.Millisecond); err == nil {
		t.Error("version 9 was taken for 10")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = store.Update(at("11"))
	}()
	if err := awaitVersion(ctx, store, "kubernetes", "10", 5*time.Second); err != nil {
		t.Errorf("version 11 is later than 10: %v", err)
	}
	if err := awaitVersion(ctx, store, "kubernetes", "", 100*time.Millisecond); err != nil {
		t.Errorf("any version: %v", err)
	}
}

func TestVersionAtLeast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
		ok        bool
	}{
		{"5", "", true},
		{"5", "5", true},
		{"10", "9", true}, // numbers, not text: "10" < "9" as text
		{"9", "10", false},
		{"x", "x", true},
		{"x", "5", false},
		{"5", "x", false},
	} {
		if ok := versionAtLeast(tc.got, tc.want); ok != tc.ok {
			t.Errorf("versionAtLeast(%q, %q) = %v, want %v", tc.got, tc.want, ok, tc.ok)
		}
	}
}
