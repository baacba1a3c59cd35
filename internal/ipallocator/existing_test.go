package ipallocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestExistingBitmapStores: given ranges win; else the ranges the stored
// maps record (clusterip.ReadStoredIPMaps), primary first; else fallback. A
// secondary map without a primary one counts as no map stored.
func TestExistingBitmapStores(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t).Client()
	for i, tc := range []struct {
		name               string
		primary, secondary string // the ranges of the stored maps; "" for none
		ranges, fallback   []string
		want               []string
	}{
		{name: "nothing stored, no fallback"},
		{name: "nothing stored: fallback", fallback: []string{"10.9.0.0/24"}, want: []string{"10.9.0.0/24"}},
		{name: "primary stored", primary: "10.0.0.0/24", fallback: []string{"10.9.0.0/24"}, want: []string{"10.0.0.0/24"}},
		{name: "both stored, primary first", primary: "fd00::/120", secondary: "10.0.0.0/24", want: []string{"fd00::/120", "10.0.0.0/24"}},
		{name: "secondary alone: fallback", secondary: "fd00::/120", fallback: []string{"10.9.0.0/24"}, want: []string{"10.9.0.0/24"}},
		{name: "given ranges win", primary: "10.0.0.0/24", ranges: []string{"10.1.0.0/24"}, want: []string{"10.1.0.0/24"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			prefix := fmt.Sprintf("/existing-%d", i)
			layout := etcdlayout.Layout{Prefix: prefix}
			for key, rangeSpec := range map[string]string{layout.PrimaryServiceIPRange(): tc.primary, layout.SecondaryServiceIPRange(): tc.secondary} {
				if rangeSpec == "" {
					continue
				}
				value, err := etcdlayout.EncodeRangeAllocation(rangeSpec, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := etcd.Put(ctx, key, string(value)); err != nil {
					t.Fatal(err)
				}
			}
			stores, err := ipallocator.ExistingBitmapStores(ctx, etcd, prefix, tc.ranges, tc.fallback)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range stores {
				got = append(got, s.Range().Prefix().String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("store ranges (-want +got):\n%s", diff)
			}
		})
	}
}
