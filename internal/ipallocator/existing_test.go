package ipallocator_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestOpenRepair: the standalone job's Backend has the repairs only; auto
// is detected from etcd; the bitmap model needs etcd and its maps, and
// creates none.
func TestOpenRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	etcd := etcdtest.New(t).Client()
	const prefix = "/registry"
	withEtcd := func(context.Context) (*clientv3.Client, error) { return etcd, nil }

	b, err := ipallocator.OpenRepair(ctx, ipallocator.Cluster{Model: model.Auto, EtcdPrefix: prefix})
	if err != nil || b.Model() != model.IPAddress || b.Etcd() != nil || b.BitmapStores() != nil || len(b.Allocators()) != 0 {
		t.Fatalf("auto without etcd: %v, %v", b, err)
	}
	if b.LeaksWaitForPasses() {
		t.Error("the IPAddress model's leaks wait for passes")
	}
	if _, err := ipallocator.OpenRepair(ctx, ipallocator.Cluster{Model: model.Bitmap, EtcdPrefix: prefix}); !errors.Is(err, ipallocator.ErrNoEtcd) {
		t.Errorf("bitmap without etcd: %v, want ErrNoEtcd", err)
	}
	if _, err := ipallocator.OpenRepair(ctx, ipallocator.Cluster{Model: model.Bitmap, Etcd: withEtcd, EtcdPrefix: prefix}); !errors.Is(err, ipallocator.ErrNoMap) {
		t.Errorf("bitmap without a map: %v, want ErrNoMap", err)
	}
	if found, err := clusterip.IPMapExists(ctx, etcd, etcdlayout.Layout{Prefix: prefix}); err != nil || found {
		t.Fatalf("a refused repair created a map: %v, %v", found, err)
	}
	if _, err := ipallocator.OpenRepair(ctx, ipallocator.Cluster{Model: "nine", EtcdPrefix: prefix}); !errors.Is(err, ipallocator.ErrUnknownModel) {
		t.Errorf("unknown model: %v, want ErrUnknownModel", err)
	}

	store, err := clusterip.NewEtcdAllocator(etcd, etcdlayout.Layout{Prefix: prefix}.PrimaryServiceIPRange(),
		subrange.MustNew(netip.MustParsePrefix("10.0.0.0/24"), model.Bitmap), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = ipallocator.OpenRepair(ctx, ipallocator.Cluster{Model: model.Auto, Etcd: withEtcd, EtcdPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if b.Model() != model.Bitmap || len(b.BitmapStores()) != 1 || b.BitmapStores()[0].Range().Prefix() != netip.MustParsePrefix("10.0.0.0/24") || !b.LeaksWaitForPasses() {
		t.Errorf("auto over a stored map: model %s, stores %v", b.Model(), b.BitmapStores())
	}
}
