package apiserver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestControllerGroupStop: stop cancels every running controller and
// returns once they have returned; a controller started after stop does not
// run; one that ignores its context makes stop give up when its own
// context ends.
func TestControllerGroupStop(t *testing.T) {
	t.Parallel()
	var g controllerGroup
	var returned atomic.Int32
	for range 3 {
		g.run(context.Background(), func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // its last request
			returned.Add(1)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := returned.Load(); n != 3 {
		t.Errorf("stop returned with %d of 3 controllers returned", n)
	}
	ran := make(chan struct{}, 1)
	g.run(context.Background(), func(context.Context) { ran <- struct{}{} })
	select {
	case <-ran:
		t.Error("a controller started after stop ran")
	case <-time.After(50 * time.Millisecond):
	}

	var stuck controllerGroup
	release := make(chan struct{})
	defer close(release)
	stuck.run(context.Background(), func(context.Context) { <-release })
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := stuck.stop(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stop of a controller that does not return: %v, want %v", err, context.DeadlineExceeded)
	}
}
