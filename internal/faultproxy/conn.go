package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// conn is one proxied connection: the client's side, the target's side and a
// pipe per direction. Its four goroutines (a reader and a writer per pipe)
// end when it is shut down or when both directions have ended; the last to
// end removes it from the proxy.
type conn struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed by shutdown
	// running counts the connection's goroutines still running.
	running atomic.Int32
	// ended counts the directions that have forwarded their end of stream.
	ended atomic.Int32

	mu     sync.Mutex
	target net.Conn // nil until dialled; guarded by mu
	closed bool     // shutdown has run; guarded by mu
}

func newConn(p *Proxy, client net.Conn) *conn {
	c := &conn{p: p, client: client, done: make(chan struct{})}
	c.running.Store(1) // serve
	return c
}

// serve dials the target, starts the connection's other three goroutines and
// becomes the reader of the client's requests.
func (c *conn) serve() {
	d := net.Dialer{Timeout: dialTimeout}
	target, err := d.DialContext(c.p.ctx, "tcp", c.p.target)
	if err != nil {
		// As the target refused us, the proxy refuses the client.
		if c.p.ctx.Err() == nil {
			c.p.count.refused.Add(1)
		}
		c.shutdown(true)
		c.exit()
		return
	}
	if !c.attach(target) {
		c.exit()
		return
	}
	c.p.count.conns.Add(1)
	up := newPipe(c, ToTarget, c.client, target)
	down := newPipe(c, FromTarget, target, c.client)
	c.running.Add(3)
	c.p.goFunc(up.write)
	c.p.goFunc(down.read)
	c.p.goFunc(down.write)
	up.read() // exits for serve
}

// attach records the dialled target side, or closes it if the connection was
// shut down during the dial.
func (c *conn) attach(target net.Conn) bool {
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.target = target
	}
	c.mu.Unlock()
	if closed {
		_ = target.Close()
		return false
	}
	return true
}

// shutdown closes both sides, with a reset when rst is set, and wakes every
// goroutine of the connection. Only the first call does anything.
func (c *conn) shutdown(rst bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	target := c.target
	c.mu.Unlock()

	closeConn := func(nc net.Conn) { _ = nc.Close() }
	if rst {
		closeConn = reset
	}
	closeConn(c.client)
	if target != nil {
		closeConn(target)
	}
}

// endDirection records that one direction has ended; when both have, the
// connection is closed.
func (c *conn) endDirection() {
	if c.ended.Add(1) == 2 {
		c.shutdown(false)
	}
}

// exit is deferred by each of the connection's goroutines.
func (c *conn) exit() {
	if c.running.Add(-1) == 0 {
		c.shutdown(false)
		c.p.unregister(c)
	}
}
