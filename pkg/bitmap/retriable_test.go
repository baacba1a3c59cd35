package bitmap

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdhistory"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
)

// TestReleaseErrorSaysIfRetriable: with etcd stopped, a release that failed
// before anything was written (the map could not be read) is
// allocation.Retriable; one whose write was sent and whose outcome could
// not be resolved is not (sending it again could clear a bit another
// Service took since).
func TestReleaseErrorSaysIfRetriable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out two 2 s deadlines against a stopped etcd; runs in the full suite")
	}
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	loaded := newTestStore(t, etcd.NewClient(t), EtcdOptions{})
	if _, err := loaded.Create(ctx); err != nil {
		t.Fatal(err)
	}
	slot, err := loaded.AllocateNextSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh := newTestStore(t, etcd.NewClient(t), EtcdOptions{}) // has not read the map yet
	etcd.Stop()

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = fresh.ReleaseSlot(short, slot)
	if err == nil || !allocation.IsRetriable(err) {
		t.Errorf("release that could not read the map: %v, retriable %v; want a retriable error", err, allocation.IsRetriable(err))
	}
	short, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = loaded.ReleaseSlot(short, slot)
	if err == nil || allocation.IsRetriable(err) {
		t.Errorf("release whose write's outcome is unknown: %v, retriable %v; want an error that is not", err, allocation.IsRetriable(err))
	}
}

// TestSettledError: a batch's failure is retriable for its releases only
// when nothing of it was applied and sending it again can be: not when its
// outcome is unknown, and not when etcd refused it because it was restored
// under the server.
func TestSettledError(t *testing.T) {
	t.Parallel()
	refused := errors.New("etcdserver: request timed out before it was sent")
	for _, tt := range []struct {
		name          string
		err           error
		wantRetriable bool
	}{
		{"no error", nil, false},
		{"nothing applied", refused, true},
		{"outcome unknown", &outcomeUnknown{err: refused}, false},
		{"etcd restored", fmt.Errorf("commit the batch: %w", fmt.Errorf("%w: the revision went back", etcdhistory.ErrRestored)), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := settledError(tt.err)
			if !errors.Is(got, tt.err) {
				t.Errorf("settledError(%v) = %v; want it to wrap the error", tt.err, got)
			}
			if r := allocation.IsRetriable(got); r != tt.wantRetriable {
				t.Errorf("settledError(%v) retriable %v; want %v", tt.err, r, tt.wantRetriable)
			}
		})
	}
}
