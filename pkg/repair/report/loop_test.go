package report

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPassLoop: failed passes are retried with a growing backoff well below
// the interval, a good pass waits the interval, and the loop ends with ctx.
func TestPassLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out two real retry delays (1 s, 2 s); runs in the full suite")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	var delays []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(ctx, time.Hour, func(context.Context) error {
			calls++
			if calls <= 2 {
				return errors.New("boom")
			}
			cancel() // a good pass: the next one would be an hour away
			return nil
		}, func(err error, retryIn time.Duration) { delays = append(delays, retryIn) })
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Loop did not end with its context")
	}
	if calls != 3 || len(delays) != 2 {
		t.Fatalf("calls %d, failures reported %v; want 3 calls, 2 failures", calls, delays)
	}
	if delays[0] < time.Second || delays[0] > 1200*time.Millisecond || delays[1] < 2*time.Second || delays[1] > 2400*time.Millisecond {
		t.Errorf("retry delays %v, want about 1 s then 2 s (20%% jitter)", delays)
	}
}

// TestPassLoopStopIsNoFailure: a pass that fails because the loop's
// context ended is not reported, and the loop ends.
func TestPassLoopStopIsNoFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	reported := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(ctx, time.Hour, func(ctx context.Context) error {
			cancel()
			return ctx.Err()
		}, func(error, time.Duration) { reported++ })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not end with its context")
	}
	if reported != 0 {
		t.Errorf("a pass cut short by the stop was reported %d times as failed", reported)
	}
}
