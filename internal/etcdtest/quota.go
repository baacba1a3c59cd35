package etcdtest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/embedetcd"
)

// NewWithQuota starts a single-member etcd like New whose backend quota is
// quotaBytes: once its database would grow past that, it raises the NOSPACE
// alarm and refuses every write that adds data ("mvcc: database space
// exceeded") until the alarm is disarmed, as a production etcd does at its
// --quota-backend-bytes. Reads and deletes keep working.
func NewWithQuota(t testing.TB, quotaBytes int64) *Etcd {
	t.Helper()
	if quotaBytes <= 0 {
		t.Fatalf("etcdtest: NewWithQuota(%d): the quota must be positive", quotaBytes)
	}
	e, err := start(t, embedetcd.Config{
		Name:              "etcdtest",
		DataDir:           filepath.Join(t.TempDir(), "etcd"),
		UnsafeNoFsync:     true,
		QuotaBackendBytes: quotaBytes,
	})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return e
}

// FillUntilNoSpace puts 128 KiB values under key until etcd refuses one for
// its quota, and returns that refusal; any other error ends it too. etcd
// measures its size as its backend commits (every 100 ms), so a burst of
// puts faster than that can all pass the quota check: the puts are paced,
// up to 500 (64 MiB, 2.5 s). A nil return means the quota was never
// reached.
func FillUntilNoSpace(ctx context.Context, kv clientv3.KV, key string) error {
	value := strings.Repeat("x", 128<<10)
	for range 500 {
		if _, err := kv.Put(ctx, key, value); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
