package etcdtest

import (
	"path/filepath"
	"testing"

	"github.com/allocator/allocator/pkg/embedetcd"
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
