package servicealloc

import (
	"context"
	"time"

	"github.com/allocator/allocator/pkg/allocation"
)

// retryRelease calls release until it succeeds, fails with an error that is
// not allocation.Retriable (one whose outcome is unknown, or a refusal), or
// ctx ends, and returns its last error. A release that failed on a broken
// connection or a busy etcd without being applied would otherwise leak what
// it held until the repair's next passes.
func retryRelease(ctx context.Context, release func(context.Context) error) error {
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := release(ctx)
		if err == nil || !allocation.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}
