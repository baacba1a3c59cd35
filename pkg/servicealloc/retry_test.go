package servicealloc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allocator/allocator/pkg/allocation"
)

// TestRetryRelease: a retriable failure is sent again until the release
// succeeds; any other failure ends it at once (a release whose outcome is
// unknown is never sent twice); a context that ends stops the retries.
func TestRetryRelease(t *testing.T) {
	t.Parallel()
	reset := allocation.Retriable(errors.New("connection reset by peer"))
	unknown := errors.New("resolve an ambiguous write: fence: context deadline exceeded")
	for _, tt := range []struct {
		name      string
		failures  []error // what the calls answer before success
		wantCalls int
		wantErr   error
	}{
		{"succeeds at once", nil, 1, nil},
		{"retriable twice, then succeeds", []error{reset, reset}, 3, nil},
		{"outcome unknown: sent once", []error{unknown, reset}, 1, unknown},
		{"retriable, then unknown", []error{reset, unknown}, 2, unknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := retryRelease(context.Background(), func(context.Context) error {
				calls++
				if calls <= len(tt.failures) {
					return tt.failures[calls-1]
				}
				return nil
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) {
				t.Errorf("calls %d, err %v; want %d, %v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
	t.Run("context ends", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		calls := 0
		err := retryRelease(ctx, func(context.Context) error { calls++; return reset })
		if !errors.Is(err, reset) || calls < 2 || calls > 10 {
			t.Errorf("calls %d, err %v; want a few calls and the last error", calls, err)
		}
	})
}
