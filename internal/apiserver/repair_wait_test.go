package apiserver

import (
	"context"
	"testing"
	"time"
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
