package embedetcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestInProcessClientQuota: the member's quota holds for writes in process
// too (they pass the same NOSPACE check as over gRPC).
func TestInProcessClientQuota(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd := etcdtest.NewWithQuota(t, 1<<20)
	local := etcd.InProcessClient()
	defer local.Close()
	if err := etcdtest.FillUntilNoSpace(ctx, local, "/ballast"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("puts of 128 KiB in process into a 1 MiB quota: %v, want %v", err, rpctypes.ErrNoSpace)
	}
}
