package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned by Start for a target that is not a loopback IP
// address and port.
var ErrNotLoopback = errors.New("faultproxy: target is not a loopback IP address and port")

const (
	// chunkSize is the size of one read, and so the largest chunk.
	chunkSize = 32 << 10
	// maxQueued is how many bytes a direction of a connection queues before
	// its reader waits for the writer.
	maxQueued = 4 << 20
	// dialTimeout bounds the dial to the target for a new connection.
	dialTimeout = 5 * time.Second
	// acceptBackoff is the pause after a failed Accept, such as running out
	// of file descriptors, before the next.
	acceptBackoff = 10 * time.Millisecond
)

// Stats counts what a Proxy did, for tests and logs.
type Stats struct {
	Conns   int64 // connections accepted and forwarded to the target
	Refused int64 // connections closed at once: RefuseNew, or the target refused
	Open    int64 // connections open now
	Chunks  int64 // chunks written to a peer
	Delayed int64 // chunks given a release time later than their read
	Held    int64 // chunks held (each counted once, however many Sets it stays held through)
	Dropped int64 // chunks discarded
	// Goroutines is the number of goroutines the proxy runs now: one accept
	// loop until Close, and four per open connection.
	Goroutines int64
}

// Proxy forwards TCP connections from its loopback listener to one target and
// applies the fault set by Set to their bytes.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // done when Close begins; bounds dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy starts

	state atomic.Pointer[faultState] // replaced by Set
	setMu sync.Mutex                 // serializes Set, so each state's changed is closed once

	mu     sync.Mutex
	conns  map[*conn]struct{} // open connections; guarded by mu
	closed bool               // Close has begun; guarded by mu

	closeOnce sync.Once
	closeErr  error

	count counters
}

// counters are the live values behind Stats.
type counters struct {
	conns, refused, open, chunks, delayed, held, dropped, goroutines atomic.Int64
}

// Start listens on a new 127.0.0.1 port and forwards every accepted
// connection to target ("127.0.0.1:port").
func Start(target string) (*Proxy, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("start proxy to %q: %w", target, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start proxy to %s: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: ap.String(),
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
	}
	p.state.Store(&faultState{gen: 0, at: time.Now(), changed: make(chan struct{})})
	p.goFunc(p.acceptLoop)
	return p, nil
}

// Addr returns the listener's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns "http://" + Addr(), for an etcd client's endpoint list.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Set replaces the fault applied to bytes read from now on, on open and new
// connections. Held chunks are judged again by f; the zero Fault forwards
// everything at once and so releases anything held at once, in order.
func (p *Proxy) Set(f Fault) {
	f = f.clone()
	p.setMu.Lock()
	defer p.setMu.Unlock()
	old := p.state.Load()
	p.state.Store(&faultState{fault: f, gen: old.gen + 1, at: time.Now(), changed: make(chan struct{})})
	// Store before close: a writer woken by the close must find the new state.
	close(old.changed)
}

// Cut resets every open connection now, on both sides, and discards what it
// had queued. New connections are still accepted afterwards.
func (p *Proxy) Cut() {
	for _, c := range p.openConns() {
		c.shutdown(true)
	}
}

// Close stops listening, closes every connection and waits for every
// goroutine the proxy started. Calling it again returns the first call's
// result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.ln.Close()
		for _, c := range p.openConns() {
			c.shutdown(false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns:      p.count.conns.Load(),
		Refused:    p.count.refused.Load(),
		Open:       p.count.open.Load(),
		Chunks:     p.count.chunks.Load(),
		Delayed:    p.count.delayed.Load(),
		Held:       p.count.held.Load(),
		Dropped:    p.count.dropped.Load(),
		Goroutines: p.count.goroutines.Load(),
	}
}

// goFunc runs f in a goroutine that Close waits for. Only the proxy's own
// goroutines call it (Start aside), so the WaitGroup is never at zero when it
// does and Close's Wait cannot miss a goroutine.
func (p *Proxy) goFunc(f func()) {
	p.wg.Add(1)
	p.count.goroutines.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.count.goroutines.Add(-1)
		f()
	}()
}

// acceptLoop accepts connections until Close and starts serving each.
func (p *Proxy) acceptLoop() {
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		if p.state.Load().fault.RefuseNew {
			p.count.refused.Add(1)
			reset(nc)
			continue
		}
		c := newConn(p, nc)
		if !p.register(c) {
			reset(nc)
			continue
		}
		p.goFunc(c.serve)
	}
}

// register adds c to the open connections, unless Close has begun.
func (p *Proxy) register(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.count.open.Add(1)
	return true
}

// unregister removes c, whose goroutines have all ended.
func (p *Proxy) unregister(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	p.count.open.Add(-1)
}

// openConns returns the open connections.
func (p *Proxy) openConns() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

// reset closes nc so that its peer sees a reset rather than an orderly end.
func reset(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// closeWrite sends a FIN on nc and keeps its read side open.
func closeWrite(nc net.Conn) error {
	if tc, ok := nc.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nc.Close()
}
