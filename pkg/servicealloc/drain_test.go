package servicealloc

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestDrain: writes in progress are waited for, new ones are refused with
// 503 and a Retry-After, and a drain that cannot finish says how many are
// left.
func TestDrain(t *testing.T) {
	t.Parallel()
	a, _ := newAlloc(t, "10.0.0.0/24")
	done, err := a.beginWrite()
	if err != nil {
		t.Fatal(err)
	}
	drained := make(chan error, 1)
	go func() { drained <- a.Drain(context.Background()) }()
	// Draining refuses new writes at once (poll: Drain runs concurrently).
	deadline := time.Now().Add(10 * time.Second)
	for {
		admitted, err := a.beginWrite()
		if err == nil {
			admitted() // Drain had not started yet
		}
		if err != nil {
			if !apierrors.IsServiceUnavailable(err) {
				t.Fatalf("a write while draining: %v, want 503", err)
			}
			if s, ok := apierrors.SuggestsClientDelay(err); !ok || s < 1 {
				t.Errorf("no Retry-After: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes still admitted while draining")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-drained:
		t.Fatalf("drain returned with a write in progress: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	done()
	done() // a second call changes nothing
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not return when the last write finished")
	}

	b, _ := newAlloc(t, "10.0.0.0/24")
	if _, err := b.beginWrite(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Drain(ctx); err == nil || err.Error() != "1 Service writes still in progress: context deadline exceeded" {
		t.Errorf("drain past its deadline: %v", err)
	}
}
