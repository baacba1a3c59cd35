package embedetcd

import (
	"context"
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
