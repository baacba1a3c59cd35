package faultproxy

import (
	"testing"
	"time"
)

// TestPushWaitsForSpace checks the bound on a pipe's queue: a reader that
// has queued maxQueued bytes waits until the writer takes some, or until the
// connection is shut down.
func TestPushWaitsForSpace(t *testing.T) {
	t.Parallel()
	c := newConn(&Proxy{}, nil)
	pi := newPipe(c, ToTarget, nil, nil)
	if !pi.push(&chunk{data: make([]byte, maxQueued)}, hold) {
		t.Fatal("push into an empty queue failed")
	}

	pushed := make(chan bool, 1)
	go func() { pushed <- pi.push(&chunk{data: []byte("x")}, pass) }()
	select {
	case <-pushed:
		t.Fatal("push into a full queue returned")
	case <-time.After(quiet):
	}
	// What the writer does when it takes the head.
	pi.mu.Lock()
	pi.queue, pi.queued = pi.queue[1:], 0
	pi.mu.Unlock()
	signal(pi.space)
	select {
	case ok := <-pushed:
		if !ok {
			t.Fatal("push failed after the queue drained")
		}
	case <-time.After(patience):
		t.Fatal("push still waiting after the queue drained")
	}

	pi.push(&chunk{data: make([]byte, maxQueued)}, pass)
	go func() { pushed <- pi.push(&chunk{data: []byte("y")}, pass) }()
	close(c.done) // what shutdown does, without sockets to close
	select {
	case ok := <-pushed:
		if ok {
			t.Fatal("push into a full queue of a shut down connection succeeded")
		}
	case <-time.After(patience):
		t.Fatal("push still waiting after shutdown")
	}
}
