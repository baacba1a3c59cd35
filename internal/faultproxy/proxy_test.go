package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// patience bounds every wait for something that must happen.
	patience = 10 * time.Second
	// quiet is how long a test listens for bytes that must not arrive.
	quiet = 200 * time.Millisecond
)

// server is the proxy's target in tests: it sends its greeting, if any, on
// each connection and then echoes what it reads until EOF.
type server struct {
	ln       net.Listener
	greeting []byte
	accepted atomic.Int64
	received atomic.Int64  // bytes read, on all connections
	ended    chan struct{} // one value per connection whose echo ended
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu
}

// startServer starts a server on 127.0.0.1:0, closed when t ends.
func startServer(t *testing.T, greeting string) *server {
	t.Helper()
	s := newServer(t, greeting)
	t.Cleanup(s.close)
	return s
}

func newServer(t *testing.T, greeting string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{
		ln:       ln,
		greeting: []byte(greeting),
		ended:    make(chan struct{}, 1024),
		conns:    make(map[net.Conn]struct{}),
	}
	s.wg.Add(1)
	go s.serve()
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.echo(c)
	}
}

func (s *server) echo(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
		select {
		case s.ended <- struct{}{}:
		default:
		}
	}()
	if len(s.greeting) > 0 {
		if _, err := c.Write(s.greeting); err != nil {
			return
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.received.Add(int64(n))
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *server) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// startProxy starts a proxy to target, closed when t ends; closing it must
// leave none of its goroutines running.
func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
		if st := p.Stats(); st.Goroutines != 0 || st.Open != 0 {
			t.Errorf("after Close: %d goroutines, %d open connections, want none", st.Goroutines, st.Open)
		}
	})
	return p
}

// dial connects to the proxy; the connection is closed when t ends.
func dial(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(patience))
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// receive reads exactly len(want) bytes and compares them with want.
func receive(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: got %q: %v", want, got, err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// expectSilence fails if c receives anything, or ends, within quiet.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want nothing until the deadline", buf[:n], err)
	}
}

// expectClosed fails unless reading c ends in EOF or an error, not a timeout.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	n, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v (%d bytes read)", patience, n)
	}
}

// expectRefused fails unless a new connection to p is closed at once. The
// proxy may reset it before the dial returns.
func expectRefused(t *testing.T, p *Proxy) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), patience)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("dial: %v", err)
		}
		return
	}
	defer c.Close()
	expectClosed(t, c)
}

// waitFor polls cond until it holds, failing after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartRejectsNonLoopback(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"10.0.0.1:2379", "localhost:2379", "127.0.0.1", "[::2]:80"} {
		p, err := Start(target)
		if !errors.Is(err, ErrNotLoopback) {
			if p != nil {
				_ = p.Close()
			}
			t.Errorf("Start(%q) = %v, want ErrNotLoopback", target, err)
		}
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") || p.URL() != "http://"+p.Addr() {
		t.Errorf("URL() = %q, Addr() = %q", p.URL(), p.Addr())
	}

	sizes := []int{4 << 20}
	for range 16 {
		sizes = append(sizes, 256<<10)
	}
	errs := make(chan error, len(sizes))
	for i, size := range sizes {
		c := dial(t, p)
		go func() { errs <- roundTrip(c, size, uint64(i)) }()
	}
	for range sizes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	waitFor(t, "connections to end", func() bool { return p.Stats().Open == 0 })
	if st := p.Stats(); st.Conns != int64(len(sizes)) || st.Chunks == 0 || st.Delayed+st.Held+st.Dropped != 0 {
		t.Errorf("stats %+v, want %d connections, chunks and no faults", st, len(sizes))
	}
}

// roundTrip sends size random bytes through the echo server, half-closes
// and checks that exactly the same bytes come back, then EOF.
func roundTrip(c *net.TCPConn, size int, seed uint64) error {
	_ = c.SetDeadline(time.Now().Add(2 * patience))
	data := make([]byte, size)
	rnd := rand.New(rand.NewPCG(seed, seed))
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err := <-werr; err != nil {
		return fmt.Errorf("write %d bytes: %w", size, err)
	}
	if err != nil {
		return fmt.Errorf("read %d bytes: %w", size, err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("%d bytes sent, %d came back, not the same", size, len(got))
	}
	return nil
}

func TestDelay(t *testing.T) {
	t.Parallel()
	const d = 200 * time.Millisecond
	tests := []struct {
		dir      Direction
		atLeast  time.Duration
		messages []string
	}{
		{dir: Both, atLeast: 2 * d, messages: []string{"one", "two", "three"}},
		{dir: ToTarget, atLeast: d, messages: []string{"a", "b"}},
		{dir: FromTarget, atLeast: d, messages: []string{"x"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir.String(), func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, startServer(t, "").addr())
			p.Set(Fault{Delay: d, Direction: tt.dir})
			c := dial(t, p)
			start := time.Now()
			for _, m := range tt.messages {
				send(t, c, m)
			}
			receive(t, c, strings.Join(tt.messages, ""))
			if got := time.Since(start); got < tt.atLeast {
				t.Errorf("echo after %v, want at least %v", got, tt.atLeast)
			}
			if p.Stats().Delayed == 0 {
				t.Error("no chunk counted as delayed")
			}
		})
	}
}

// TestDelayKeepsOrder checks that a chunk read after the delay ends still
// waits for the delayed chunk before it.
func TestDelayKeepsOrder(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	p := startProxy(t, startServer(t, "").addr())
	p.Set(Fault{Delay: d, Direction: ToTarget})
	c := dial(t, p)
	start := time.Now()
	send(t, c, "a")
	waitFor(t, "the delayed chunk", func() bool { return p.Stats().Delayed == 1 })
	p.Set(Fault{})
	send(t, c, "b")
	receive(t, c, "ab")
	if got := time.Since(start); got < d {
		t.Errorf("echo after %v, want at least %v", got, d)
	}
}

// TestDelayLagsFollowers checks that an unmatched chunk read behind a
// delayed one, under the same fault, is delayed as long from its own read.
func TestDelayLagsFollowers(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	p := startProxy(t, startServer(t, "").addr())
	p.Set(Fault{Delay: d, Direction: ToTarget, Match: [][]byte{[]byte("M")}})
	c := dial(t, p)
	send(t, c, "M")
	waitFor(t, "the delayed chunk", func() bool { return p.Stats().Delayed == 1 })
	time.Sleep(50 * time.Millisecond) // a gap the follower must keep
	sent := time.Now()
	send(t, c, "x")
	receive(t, c, "Mx")
	if got := time.Since(sent); got < d {
		t.Errorf("follower forwarded %v after it was sent, want at least %v", got, d)
	}
}

func TestHold(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	tests := []struct {
		name string
		then Fault
		// released: the held bytes arrive, no sooner than atLeast after the Set.
		released bool
		atLeast  time.Duration
	}{
		{name: "zero fault releases", then: Fault{}, released: true},
		{name: "delay releases later", then: Fault{Delay: d}, released: true, atLeast: d},
		{name: "other match releases", then: Fault{Hold: true, Match: [][]byte{[]byte("nowhere")}}, released: true},
		// The request is released at once, its echo delayed.
		{name: "other direction releases", then: Fault{Delay: d, Direction: FromTarget}, released: true, atLeast: d},
		{name: "hold keeps", then: Fault{Hold: true}},
		{name: "drop discards", then: Fault{Drop: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, startServer(t, "").addr())
			p.Set(Fault{Hold: true, Direction: ToTarget})
			c := dial(t, p)
			send(t, c, "abc")
			waitFor(t, "the held chunk", func() bool { return p.Stats().Held == 1 })
			send(t, c, "def")
			expectSilence(t, c)

			setAt := time.Now()
			p.Set(tt.then)
			if !tt.released {
				expectSilence(t, c)
				return
			}
			receive(t, c, "abcdef")
			if got := time.Since(setAt); got < tt.atLeast {
				t.Errorf("released after %v, want at least %v", got, tt.atLeast)
			}
		})
	}
}

func TestDrop(t *testing.T) {
	t.Parallel()
	for _, dir := range []Direction{ToTarget, FromTarget} {
		t.Run(dir.String(), func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, startServer(t, "").addr())
			p.Set(Fault{Drop: true, Direction: dir, Match: [][]byte{[]byte("DROP")}})
			dropped, other := dial(t, p), dial(t, p)
			send(t, dropped, "one")
			receive(t, dropped, "one")

			send(t, dropped, "xDROPx")
			expectSilence(t, dropped)
			send(t, dropped, "two")
			expectSilence(t, dropped)
			send(t, other, "hello")
			receive(t, other, "hello")

			// Drop lasts as long as the connection.
			p.Set(Fault{})
			send(t, dropped, "three")
			expectSilence(t, dropped)
			send(t, other, "world")
			receive(t, other, "world")
			waitFor(t, "two dropped chunks", func() bool { return p.Stats().Dropped >= 2 })
		})
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	key := [][]byte{[]byte("/fault/")}
	tests := []struct {
		name  string
		fault Fault
	}{
		{name: "hold", fault: Fault{Hold: true, Match: key}},
		{name: "delay", fault: Fault{Delay: time.Minute, Match: key}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, startServer(t, "").addr())
			p.Set(tt.fault)
			matching, other := dial(t, p), dial(t, p)
			send(t, matching, "put /fault/x")
			send(t, other, "put /other/y")
			receive(t, other, "put /other/y")
			// Unmatched, but after a matched chunk on its connection.
			send(t, matching, "z")
			expectSilence(t, matching)
		})
	}
}

func TestMatchAcrossReads(t *testing.T) {
	t.Parallel()
	p := startProxy(t, startServer(t, "").addr())
	p.Set(Fault{Hold: true, Direction: ToTarget, Match: [][]byte{[]byte("/fault/")}})
	c := dial(t, p)
	send(t, c, "put /fa")
	// The echo proves the proxy read the first half on its own.
	receive(t, c, "put /fa")
	send(t, c, "ult/x")
	// The proxy reads the second half when the scheduler lets it: wait for
	// the hold, then see that nothing passes.
	waitFor(t, "the second half held", func() bool { return p.Stats().Held == 1 })
	expectSilence(t, c)
	if got := p.Stats().Held; got != 1 {
		t.Errorf("%d chunks held, want 1", got)
	}
	p.Set(Fault{})
	receive(t, c, "ult/x")
}

func TestDirection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dir Direction
		// What passes while the fault holds: the server's greeting
		// (FromTarget) and the client's request (ToTarget).
		greeting, request bool
	}{
		{dir: ToTarget, greeting: true},
		{dir: FromTarget, request: true},
		{dir: Both},
	}
	for _, tt := range tests {
		t.Run(tt.dir.String(), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, "hi\n")
			p := startProxy(t, s.addr())
			p.Set(Fault{Hold: true, Direction: tt.dir})
			c := dial(t, p)
			send(t, c, "ping")
			if tt.request {
				waitFor(t, "the request at the server", func() bool { return s.received.Load() == 4 })
			}
			if tt.greeting {
				receive(t, c, "hi\n")
			}
			expectSilence(t, c)
			if got := s.received.Load(); !tt.request && got != 0 {
				t.Errorf("server received %d bytes of a held request", got)
			}

			p.Set(Fault{})
			if !tt.greeting {
				receive(t, c, "hi\n")
			}
			receive(t, c, "ping")
		})
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	c := dial(t, p)
	send(t, c, "before")
	receive(t, c, "before")

	p.Cut()
	expectClosed(t, c)
	select {
	case <-s.ended:
	case <-time.After(patience):
		t.Fatal("the server's side is still open after Cut")
	}
	waitFor(t, "the cut connection to end", func() bool { return p.Stats().Open == 0 })

	after := dial(t, p)
	send(t, after, "after")
	receive(t, after, "after")
}

func TestRefuseNew(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	p := startProxy(t, s.addr())
	old := dial(t, p)
	send(t, old, "old")
	receive(t, old, "old")

	p.Set(Fault{RefuseNew: true})
	expectRefused(t, p)
	waitFor(t, "the refused connection to be counted", func() bool { return p.Stats().Refused == 1 })
	send(t, old, "still")
	receive(t, old, "still")

	p.Set(Fault{})
	fresh := dial(t, p)
	send(t, fresh, "new")
	receive(t, fresh, "new")
	if got := s.accepted.Load(); got != 2 {
		t.Errorf("server accepted %d connections, want 2 (the refused one never reaches it)", got)
	}
}

func TestTargetDown(t *testing.T) {
	t.Parallel()
	s := newServer(t, "")
	s.close() // its port now refuses connections
	p := startProxy(t, s.addr())
	expectRefused(t, p)
	waitFor(t, "the refused connection to be counted", func() bool { return p.Stats().Refused == 1 })
}

func TestClose(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	p, err := Start(s.addr())
	if err != nil {
		t.Fatal(err)
	}
	var conns []*net.TCPConn
	for range 10 {
		c := dial(t, p)
		send(t, c, "open")
		receive(t, c, "open")
		conns = append(conns, c)
	}
	p.Set(Fault{Hold: true})
	for _, c := range conns[:5] {
		send(t, c, "held")
	}
	waitFor(t, "held chunks", func() bool { return p.Stats().Held == 5 })

	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := time.Since(start); got > patience {
		t.Errorf("Close took %v", got)
	}
	if st := p.Stats(); st.Goroutines != 0 || st.Open != 0 {
		t.Errorf("after Close: %d goroutines, %d open connections, want none", st.Goroutines, st.Open)
	}
	for _, c := range conns {
		expectClosed(t, c)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNoLeaks opens and ends many connections every way they can end and
// checks that the proxy's goroutines, and then all of the process's, settle.
// It does not run in parallel (go test starts the parallel tests after it),
// so that it can count every goroutine of the process.
func TestNoLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	s := newServer(t, "")
	p, err := Start(s.addr())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		c, err := net.DialTimeout("tcp", p.Addr(), patience)
		if err != nil {
			t.Fatal(err)
		}
		send(t, c, "x")
		receive(t, c, "x")
		switch i % 4 {
		case 0: // orderly end from the client
			_ = c.Close()
		case 1: // reset from the client
			reset(c)
		case 2: // half close, then the server's end
			_ = c.(*net.TCPConn).CloseWrite()
			expectClosed(t, c)
			_ = c.Close()
		case 3: // cut while a chunk is held
			p.Set(Fault{Hold: true})
			send(t, c, "y")
			waitFor(t, "the held chunk", func() bool { return p.Stats().Held > 0 })
			p.Cut()
			p.Set(Fault{})
			_ = c.Close()
		}
	}
	waitFor(t, "connections to end", func() bool {
		st := p.Stats()
		return st.Open == 0 && st.Goroutines == 1 // the accept loop
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	s.close()
	waitFor(t, fmt.Sprintf("goroutines to settle at %d", base), func() bool {
		return runtime.NumGoroutine() <= base
	})
}
