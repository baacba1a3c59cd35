package bitmap

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
	loaded := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/24", EtcdOptions{})
	if _, err := loaded.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	owner := allocation.Owner{Namespace: "default", Name: "web"}
	ip, err := loaded.AllocateNext(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	fresh := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/24", EtcdOptions{}) // has not read the map yet
	etcd.Stop()

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = fresh.Release(short, ip, owner)
	if err == nil || !allocation.IsRetriable(err) {
		t.Errorf("release that could not read the map: %v, retriable %v; want a retriable error", err, allocation.IsRetriable(err))
	}
	short, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = loaded.Release(short, ip, owner)
	if err == nil || allocation.IsRetriable(err) {
		t.Errorf("release whose write's outcome is unknown: %v, retriable %v; want an error that is not", err, allocation.IsRetriable(err))
	}
}
