package rangealloc

import (
	"context"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
)

// TestReleaseErrorSaysIfRetriable: with etcd stopped, a release that failed
// before anything was written (the map could not be read) is
// allocation.Retriable; one whose write was sent and whose outcome could
// not be resolved is not (sending it again could clear a bit another
// Service took since).
func TestReleaseErrorSaysIfRetriable(t *testing.T) {
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
