package embedetcd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestStartPutGetClose(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	cfg := s.Config()
	if strings.HasSuffix(cfg.ClientURL, ":0") || strings.HasSuffix(cfg.PeerURL, ":0") {
		t.Fatalf("URLs not resolved: %+v", cfg)
	}
	if got := s.Endpoints(); len(got) != 1 || got[0] != cfg.ClientURL {
		t.Fatalf("Endpoints() = %v, want [%s]", got, cfg.ClientURL)
	}
	// No quota given: the member's is DefaultQuotaBackendBytes, not etcd's 2 GiB.
	if got := s.etcd.Config().QuotaBackendBytes; got != DefaultQuotaBackendBytes || cfg.QuotaBackendBytes != got {
		t.Fatalf("quota %d (Config() says %d), want %d", got, cfg.QuotaBackendBytes, DefaultQuotaBackendBytes)
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v", resp.Kvs)
	}

	// Close is idempotent and safe from several goroutines.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(s.Close)
	}
	wg.Wait()
	s.Close()
	select {
	case <-s.Err():
	case <-time.After(10 * time.Second):
		t.Fatal("Err() not closed after Close")
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{}, "DataDir is required"},
		{"non-loopback client", Config{DataDir: t.TempDir(), ClientURL: "http://10.1.2.3:2379"}, "loopback"},
		{"hostname", Config{DataDir: t.TempDir(), PeerURL: "http://example.com:2380"}, "loopback"},
		{"https without PKI", Config{DataDir: t.TempDir(), ClientURL: "https://127.0.0.1:2379"}, "https needs Config.PKI"},
		{"scheme", Config{DataDir: t.TempDir(), ClientURL: "unix://127.0.0.1:2379"}, "only http and https"},
		{"path", Config{DataDir: t.TempDir(), ClientURL: "http://127.0.0.1:2379/x"}, "host:port only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := Start(ctx, tt.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Start succeeded, want error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// TestStartTimeout: Config.StartTimeout bounds the wait for a context
// without a deadline (0 by DefaultStartTimeout), a negative one leaves it
// unbounded, and a context's own deadline wins; a member not ready within
// the bound is stopped, and its data dir starts again.
func TestStartTimeout(t *testing.T) {
	t.Parallel()
	soon, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ownDeadline, _ := soon.Deadline()
	tests := []struct {
		name    string
		ctx     context.Context
		timeout time.Duration
		want    time.Duration // 0: no deadline
	}{
		{"default", context.Background(), 0, DefaultStartTimeout},
		{"set", context.Background(), 3 * time.Minute, 3 * time.Minute},
		{"unbounded", context.Background(), -1, 0},
		{"the context's own", soon, 3 * time.Minute, time.Until(ownDeadline)},
		{"the context's own, unbounded", soon, -1, time.Until(ownDeadline)},
	}
	for _, tt := range tests {
		ctx, cancel := boundStart(tt.ctx, tt.timeout)
		deadline, ok := ctx.Deadline()
		cancel()
		switch {
		case tt.want == 0 && ok:
			t.Errorf("%s: deadline in %v, want none", tt.name, time.Until(deadline))
		case tt.want != 0 && (!ok || time.Until(deadline) > tt.want || time.Until(deadline) < tt.want-10*time.Second):
			t.Errorf("%s: deadline %v (set %v), want in %v", tt.name, time.Until(deadline), ok, tt.want)
		}
	}

	dir := t.TempDir()
	if s, err := Start(context.Background(), Config{DataDir: dir, UnsafeNoFsync: true, StartTimeout: time.Nanosecond}); err == nil {
		s.Close()
		t.Fatal("a member given a nanosecond started")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a member given a nanosecond: %v, want the deadline", err)
	}
	s, err := Start(context.Background(), Config{DataDir: dir, UnsafeNoFsync: true, StartTimeout: -1})
	if err != nil {
		t.Fatalf("the data dir of a member stopped before ready: %v", err)
	}
	s.Close()
}
