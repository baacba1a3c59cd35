package app

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
)

func TestSetServeGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	unset := func(string) (string, bool) { return "", false }
	if percent, set := setServeGC(unset); !set || percent != serveGCPercent {
		t.Errorf("GOGC unset: got %d, set %v; want %d, set", percent, set, serveGCPercent)
	}
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("GOGC unset: the runtime collects at %d, want %d", got, serveGCPercent)
	}

	// GOGC in the environment is already the runtime's: it is kept.
	debug.SetGCPercent(200)
	set := func(k string) (string, bool) { return "200", k == "GOGC" }
	if percent, changed := setServeGC(set); changed || percent != 200 {
		t.Errorf("GOGC=200: got %d, set %v; want 200, kept", percent, changed)
	}
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("GOGC=200: the runtime collects at %d", got)
	}
}

// releaseAfterStartup returns once the start-up is over, or once the
// server stops before that.
func TestReleaseAfterStartup(t *testing.T) {
	started := make(chan struct{})
	done := make(chan struct{})
	go func() { releaseAfterStartup(context.Background(), started); close(done) }()
	close(started)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not returned after the start-up")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { releaseAfterStartup(ctx, make(chan struct{})); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not returned when the server stopped first")
	}
}
