package app

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

// The runtime's percentage is process-wide: these tests do not run in
// parallel, and each puts back what it found.

func TestSetServeGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	unset := func(string) (string, bool) { return "", false }
	if percent, set := setServeGC(unset); !set || percent != startupGCPercent {
		t.Errorf("GOGC unset: got %d, set %v; want %d, set", percent, set, startupGCPercent)
	}
	if got := debug.SetGCPercent(100); got != startupGCPercent {
		t.Errorf("GOGC unset: the runtime collects at %d during the start-up, want %d", got, startupGCPercent)
	}

	// GOGC in the environment is already the runtime's: it is kept.
	set := func(k string) (string, bool) { return "300", k == "GOGC" }
	debug.SetGCPercent(300)
	if percent, changed := setServeGC(set); changed || percent != 300 {
		t.Errorf("GOGC=300: got %d, set %v; want 300, kept", percent, changed)
	}
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("GOGC=300: the runtime collects at %d", got)
	}
}

// releaseAfterStartup applies serve's percentage once the start-up is over
// or its window has passed, only when setServeGC set the start-up's; it
// changes nothing when the server stops first.
func TestReleaseAfterStartup(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	run := func(ctx context.Context, started <-chan struct{}, ours bool, window time.Duration) <-chan struct{} {
		done := make(chan struct{})
		go func() { releaseAfterStartup(ctx, started, ours, window); close(done) }()
		return done
	}
	wait := func(done <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("not returned %s", what)
		}
	}
	for _, tc := range []struct {
		name  string
		ours  bool
		after func(started chan struct{}, cancel context.CancelFunc) time.Duration // returns the window
		want  int
	}{
		{"first repair pass", true, func(started chan struct{}, _ context.CancelFunc) time.Duration {
			close(started)
			return time.Hour
		}, serveGCPercent},
		{"window passed", true, func(chan struct{}, context.CancelFunc) time.Duration { return time.Millisecond }, serveGCPercent},
		{"GOGC from the environment", false, func(started chan struct{}, _ context.CancelFunc) time.Duration {
			close(started)
			return time.Hour
		}, startupGCPercent},
		{"server stopped first", true, func(_ chan struct{}, cancel context.CancelFunc) time.Duration {
			cancel()
			return time.Hour
		}, startupGCPercent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(startupGCPercent)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started := make(chan struct{})
			window := tc.after(started, cancel)
			wait(run(ctx, started, tc.ours, window), "after "+tc.name)
			if got := debug.SetGCPercent(startupGCPercent); got != tc.want {
				t.Errorf("the runtime collects at %d, want %d", got, tc.want)
			}
		})
	}
}
