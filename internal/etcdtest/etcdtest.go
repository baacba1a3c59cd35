// Package etcdtest starts real etcd members for tests, on free 127.0.0.1
// ports in t.TempDir(), with logging off.
//
// Invariants:
//   - Only 127.0.0.1 is ever bound or contacted.
//   - Everything started here is stopped by t.Cleanup, in reverse order:
//     clients are closed before the member they talk to.
//   - Stop and Restart keep the member's data directory and client URL, so
//     clients created before a Stop reconnect after the Restart (clients from
//     this package redial quickly: their reconnect backoff is capped at
//     500ms instead of gRPC's 2 minutes). That is what fault tests need to
//     stop etcd in the middle of a run.
//   - Members run with fsync off: data survives a Stop/Restart of the member,
//     not a machine crash, which no test needs.
package etcdtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

const (
	startTimeout = 60 * time.Second
	dialTimeout  = 5 * time.Second
	// restartPortWait bounds how long Restart waits for its old client port
	// to become free again (another process may have grabbed it meanwhile).
	restartPortWait = 10 * time.Second
)

// Etcd is one etcd member started for a test.
type Etcd struct {
	cfg embedetcd.Config // resolved: concrete URLs, fixed data dir

	mu     sync.Mutex
	srv    *embedetcd.Server // nil while stopped; guarded by mu
	client *clientv3.Client  // shared client, created lazily; guarded by mu
}

// New starts a single-member etcd for the test and stops it on cleanup.
func New(t testing.TB) *Etcd {
	t.Helper()
	e, err := start(t, embedetcd.Config{
		Name:          "etcdtest",
		DataDir:       filepath.Join(t.TempDir(), "etcd"),
		UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return e
}

// start starts a member and registers its cleanup.
func start(t testing.TB, cfg embedetcd.Config) (*Etcd, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := embedetcd.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e := &Etcd{cfg: srv.Config(), srv: srv}
	t.Cleanup(e.shutdown)
	return e, nil
}

// shutdown closes the shared client and stops the member.
func (e *Etcd) shutdown() {
	e.mu.Lock()
	c := e.client
	e.client = nil
	e.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	e.Stop()
}

// Endpoints returns the member's client URLs.
func (e *Etcd) Endpoints() []string { return []string{e.cfg.ClientURL} }

// DataDir returns the member's data directory.
func (e *Etcd) DataDir() string { return e.cfg.DataDir }

// Client returns a client shared by every caller of Client on this member.
// It is closed when the test ends; do not close it yourself.
func (e *Etcd) Client() *clientv3.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client == nil {
		c, err := newClient(e.Endpoints())
		if err != nil {
			// newClient only fails on bad config, which is ours to get right.
			panic(fmt.Sprintf("etcdtest: %v", err))
		}
		e.client = c
	}
	return e.client
}

// InProcessClient returns a client calling the running member in this
// process (embedetcd.Server.InProcessClient), as `allocator serve` reaches
// its embedded etcd; the caller closes it. It does not survive Stop or
// Restart: give it only to what lives no longer than the member.
func (e *Etcd) InProcessClient() *clientv3.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv == nil {
		panic("etcdtest: InProcessClient of a stopped member")
	}
	return e.srv.InProcessClient()
}

// NewClient returns an independent client, closed when t ends.
func (e *Etcd) NewClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := newClient(e.Endpoints())
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Proxy starts a fault proxy (internal/faultproxy) in front of the member,
// closed at the test's end.
func (e *Etcd) Proxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(strings.TrimPrefix(e.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Proxied starts a fault proxy in front of the member (Proxy) and returns
// it with a client that reaches the member through it, closed at the
// test's end.
func (e *Etcd) Proxied(t testing.TB) (*faultproxy.Proxy, *clientv3.Client) {
	t.Helper()
	p := e.Proxy(t)
	c, err := newClient([]string{p.URL()})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

// Stop stops the member and waits until it is down; its data stays. Clients
// keep existing and fail (or block until their context ends) until Restart.
// Stopping a stopped member does nothing.
func (e *Etcd) Stop() {
	e.mu.Lock()
	srv := e.srv
	e.srv = nil
	e.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Restart starts the member again on the same data directory and the same
// client and peer URLs, and waits until it is ready. It stops the member
// first if it is running.
func (e *Etcd) Restart(t testing.TB) {
	t.Helper()
	e.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	deadline := time.Now().Add(restartPortWait)
	for {
		srv, err := embedetcd.Start(ctx, e.cfg)
		if err == nil {
			e.mu.Lock()
			e.srv = srv
			e.mu.Unlock()
			return
		}
		if !isAddrInUse(err) || time.Now().After(deadline) {
			t.Fatalf("etcdtest: restart %s: %v", e.cfg.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   500 * time.Millisecond,
			},
			MinConnectTimeout: dialTimeout,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("new etcd client for %v: %w", endpoints, err)
	}
	return c, nil
}

// Stored is the member as a repair reads stored objects from it
// (repair.StoredObjects), their keys under layout, through Client.
func (e *Etcd) Stored(layout etcdlayout.Layout) StoredObjects {
	return StoredObjects{e: e, layout: layout}
}

// StoredObjects is a member's stored objects (Etcd.Stored).
type StoredObjects struct {
	e      *Etcd
	layout etcdlayout.Layout
}

// Etcd returns the member's shared client and the layout.
func (s StoredObjects) Etcd(context.Context) (clientv3.KV, etcdlayout.Layout, error) {
	return s.e.Client().KV, s.layout, nil
}
