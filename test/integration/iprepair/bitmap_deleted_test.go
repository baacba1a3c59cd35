package iprepair_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// racingStore runs before once, just ahead of the pass's first write.
type racingStore struct {
	*clusterip.EtcdAllocator
	once   sync.Once
	before func()
}

func (s *racingStore) CompareAndWrite(ctx context.Context, data []byte, base bitmap.StoredMap) (int64, error) {
	s.once.Do(s.before)
	return s.EtcdAllocator.CompareAndWrite(ctx, data, base)
}

// TestBitmapRepairServiceDeletedDuringPass: a Service listed without its
// bit and deleted before the pass writes (while an allocation moves the map
// on, so the write is merged onto a fresh read) gets no bit and no
// ClusterIPNotAllocated; a Service that still exists gets its bit. Seen in
// the rolling-switch e2e test: a false event and a stale bit.
func TestBitmapRepairServiceDeletedDuringPass(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	old := time.Now().Add(-time.Hour)
	repairtest.PlantService(t, etcd, "default", "gone", []string{"10.0.0.60"}, old)
	repairtest.PlantService(t, etcd, "default", "kept", []string{"10.0.0.70"}, old)
	repairtest.WaitListed(t, srv, "default", "gone", true)
	repairtest.WaitListed(t, srv, "default", "kept", true)

	store := &racingStore{EtcdAllocator: bitmapStore(t, etcd, "10.0.0.0/24")}
	store.before = func() {
		if err := srv.Client.CoreV1().Services("default").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete gone: %v", err)
		}
		// Another allocation: the pass's compare-and-swap now fails.
		if err := store.Allocate(ctx, netip.MustParseAddr("10.0.0.80"), allocation.Owner{}); err != nil {
			t.Errorf("allocate: %v", err)
		}
	}
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var notAllocated []string
	for _, p := range rep.Problems {
		if p.Reason == report.ReasonNotAllocated {
			notAllocated = append(notAllocated, p.IP)
		}
	}
	if len(notAllocated) != 1 || notAllocated[0] != "10.0.0.70" {
		t.Errorf("ClusterIPNotAllocated for %v, want only 10.0.0.70 (gone was deleted before the write)", notAllocated)
	}
	for ip, want := range map[string]bool{"10.0.0.60": false, "10.0.0.70": true, "10.0.0.80": true} {
		has, err := store.Has(ctx, netip.MustParseAddr(ip))
		if err != nil || has != want {
			t.Errorf("bit of %s = %v (%v), want %v", ip, has, err, want)
		}
	}
}
