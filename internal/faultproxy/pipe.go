package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// pipe is one direction of a connection: a reader goroutine judges each chunk
// it reads by the fault in force and queues it; a writer goroutine writes the
// queue in order, each chunk once it is due.
type pipe struct {
	c        *conn
	dir      Direction
	src, dst net.Conn
	wake     chan struct{} // capacity 1: the reader queued something
	space    chan struct{} // capacity 1: the queue shrank

	mu       sync.Mutex
	queue    []*chunk // read, not yet written or dropped; guarded by mu
	queued   int      // bytes in queue; guarded by mu
	dropping bool     // a chunk was dropped: drop everything else; guarded by mu
}

// chunk is one read, or the end of the stream.
type chunk struct {
	data []byte
	due  time.Time // when it may be written, unless held
	held bool
	gen  uint64 // the fault generation it was read, or last held, under
	// lag is how much later than its read the chunk is due; chunks read
	// behind it under the same fault lag as much.
	lag time.Duration
	// before is the stream's bytes before a held chunk, to match it again.
	before []byte

	// end marks the end of the stream: an orderly one (FIN) if eof is set,
	// an error otherwise.
	end, eof bool
}

func newPipe(c *conn, dir Direction, src, dst net.Conn) *pipe {
	return &pipe{
		c:     c,
		dir:   dir,
		src:   src,
		dst:   dst,
		wake:  make(chan struct{}, 1),
		space: make(chan struct{}, 1),
	}
}

// read reads chunks from src and queues them until src ends or the
// connection is shut down.
func (pi *pipe) read() {
	defer pi.c.exit()
	buf := make([]byte, chunkSize)
	var tail []byte // the stream's last bytes, to match across reads
	for {
		n, err := pi.src.Read(buf)
		if n > 0 {
			st := pi.c.p.state.Load()
			ch := &chunk{data: bytes.Clone(buf[:n]), due: time.Now(), gen: st.gen}
			act := st.fault.judge(pi.dir, tail, ch.data)
			switch act {
			case hold:
				ch.held, ch.before = true, bytes.Clone(tail)
			case delay:
				ch.lag = st.fault.Delay
				ch.due = ch.due.Add(ch.lag)
			}
			tail = appendTail(tail, ch.data, st.fault.tailLen())
			if !pi.push(ch, act) {
				return
			}
		}
		if err != nil {
			// Without read deadlines every error is final.
			pi.pushEnd(errors.Is(err, io.EOF))
			return
		}
	}
}

// push queues ch, which act says what to do with, waiting while the queue is
// full. It returns false if the connection was shut down.
func (pi *pipe) push(ch *chunk, act action) bool {
	count := &pi.c.p.count
	pi.mu.Lock()
	for {
		if pi.dropping || act == drop {
			pi.dropping = true
			pi.mu.Unlock()
			count.dropped.Add(1)
			return true
		}
		if pi.queued < maxQueued {
			break
		}
		pi.mu.Unlock()
		select {
		case <-pi.space:
		case <-pi.c.done:
			return false
		}
		pi.mu.Lock()
	}
	if act == pass {
		act = pi.lagBehind(ch)
	}
	pi.queue = append(pi.queue, ch)
	pi.queued += len(ch.data)
	pi.mu.Unlock()
	switch act {
	case hold:
		count.held.Add(1)
	case delay:
		count.delayed.Add(1)
	}
	signal(pi.wake)
	return true
}

// lagBehind delays ch, which its fault lets pass, as much as the chunk
// queued before it if that one was read under the same fault and lags: while
// a delayed chunk waits, the connection lags behind it rather than bursting
// after it, so the spacing between what a peer sent survives (a gRPC client's
// cancellation still arrives after the request it cancels, by as long as it
// was sent after it). It returns delay if it delayed ch. pi.mu must be held.
func (pi *pipe) lagBehind(ch *chunk) action {
	n := len(pi.queue)
	if n == 0 {
		return pass
	}
	last := pi.queue[n-1]
	if last.end || last.gen != ch.gen || last.lag <= 0 {
		return pass
	}
	ch.lag = last.lag
	ch.due = ch.due.Add(ch.lag)
	return delay
}

// pushEnd queues the end of the stream; it never waits.
func (pi *pipe) pushEnd(eof bool) {
	pi.mu.Lock()
	pi.queue = append(pi.queue, &chunk{end: true, eof: eof})
	pi.mu.Unlock()
	signal(pi.wake)
}

// write writes the queue to dst in order until the end of the stream or the
// connection is shut down.
func (pi *pipe) write() {
	defer pi.c.exit()
	p := pi.c.p
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		// Load the state before looking at the queue: a Set after this
		// closes st.changed, so waiting on it cannot miss the Set.
		st := p.state.Load()
		pi.mu.Lock()
		if len(pi.queue) == 0 {
			pi.mu.Unlock()
			select {
			case <-pi.wake:
			case <-pi.c.done:
				return
			}
			continue
		}
		head := pi.queue[0]
		if head.held && head.gen < st.gen {
			pi.rejudge(head, st)
			pi.mu.Unlock()
			continue
		}
		if head.held {
			pi.mu.Unlock()
			select {
			case <-st.changed:
			case <-pi.c.done:
				return
			}
			continue
		}
		if wait := time.Until(head.due); wait > 0 {
			pi.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-pi.c.done:
				return
			}
			continue
		}
		pi.queue[0] = nil
		pi.queue = pi.queue[1:]
		pi.queued -= len(head.data)
		dropping := pi.dropping
		pi.mu.Unlock()
		signal(pi.space)

		if head.end {
			pi.finish(head.eof, dropping)
			return
		}
		if _, err := pi.dst.Write(head.data); err != nil {
			pi.c.shutdown(true)
			return
		}
		p.count.chunks.Add(1)
	}
}

// rejudge judges the held chunk at the head of the queue again by the fault
// now in force, as if it had just been read. pi.mu must be held.
func (pi *pipe) rejudge(head *chunk, st *faultState) {
	switch st.fault.judge(pi.dir, head.before, head.data) {
	case hold:
		head.gen = st.gen
		return
	case drop:
		pi.dropQueued()
		return
	case delay:
		head.gen, head.lag = st.gen, st.fault.Delay
		head.due = st.at.Add(head.lag)
		pi.c.p.count.delayed.Add(1)
	default:
		head.due = st.at
	}
	head.held, head.before = false, nil
}

// dropQueued starts dropping and discards every queued chunk but the end of
// the stream. pi.mu must be held.
func (pi *pipe) dropQueued() {
	pi.dropping = true
	kept := pi.queue[:0]
	for _, ch := range pi.queue {
		if ch.end {
			kept = append(kept, ch)
			continue
		}
		pi.c.p.count.dropped.Add(1)
	}
	clear(pi.queue[len(kept):])
	pi.queue = kept
	pi.queued = 0
	signal(pi.space)
}

// finish forwards the end of the stream. An orderly end becomes a FIN to dst
// (a half close: the other direction goes on); an error resets both sides.
// A dropping pipe swallows either: the black hole keeps its peer waiting.
func (pi *pipe) finish(eof, dropping bool) {
	switch {
	case dropping:
	case !eof:
		pi.c.shutdown(true)
		return
	default:
		if err := closeWrite(pi.dst); err != nil {
			pi.c.shutdown(true)
			return
		}
	}
	pi.c.endDirection()
}

// appendTail returns the last n bytes of the stream tail followed by data,
// reusing tail's array.
func appendTail(tail, data []byte, n int) []byte {
	if len(data) >= n {
		return append(tail[:0], data[len(data)-n:]...)
	}
	keep := min(len(tail), n-len(data))
	t := make([]byte, 0, n)
	t = append(t, tail[len(tail)-keep:]...)
	return append(t, data...)
}

// signal wakes the goroutine waiting on ch, or the next one to wait.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
