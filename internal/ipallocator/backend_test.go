package ipallocator_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestOpenBitmapOnEtcd: the bitmap model's allocators are the stored maps at
// kube-apiserver's keys (primary family at serviceips, whatever its family),
// created empty at open, and the Backend reports exactly those maps as its
// stores: an allocation through the allocator is seen in the store.
func TestOpenBitmapOnEtcd(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	b, err := ipallocator.Open(ctx, ipallocator.Config{
		Model:    model.Bitmap,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/112"), netip.MustParsePrefix("10.0.0.0/24")},
		Etcd:     etcd.Client(), EtcdPrefix: "/custom",
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.Model() != model.Bitmap {
		t.Errorf("Model() = %q", b.Model())
	}
	layout := etcdlayout.Layout{Prefix: "/custom"}
	for _, key := range []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()} {
		resp, err := etcd.Client().Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("%s: not created at open", key)
		}
	}
	allocators, stores := b.Allocators(), b.BitmapStores()
	if len(allocators) != 2 || len(stores) != 2 {
		t.Fatalf("%d allocators, %d stores; want 2 and 2", len(allocators), len(stores))
	}
	var ranges []string
	for _, s := range stores {
		ranges = append(ranges, s.Range().Prefix().String())
	}
	if diff := cmp.Diff([]string{"fd00::/112", "10.0.0.0/24"}, ranges); diff != "" {
		t.Errorf("stores' ranges, primary first (-want +got):\n%s", diff)
	}
	ip := netip.MustParseAddr("10.0.0.7")
	if err := allocators[1].Allocate(ctx, ip, allocation.Owner{Namespace: "default", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	held, err := stores[1].(interface {
		Has(context.Context, netip.Addr) (bool, error)
	}).Has(ctx, ip)
	if err != nil || !held {
		t.Errorf("the store does not hold what its allocator allocated: %v, %v", held, err)
	}
	r, err := b.Repair(ipallocator.RepairConfig{})
	if err == nil || r != nil {
		// The bitmap repair needs a client to read Services.
		t.Errorf("Repair without a client = %v, %v; want an error", r, err)
	}
	if r, err := b.TransitionRepair(ipallocator.RepairConfig{}); r != nil || err != nil {
		t.Errorf("TransitionRepair in no transition = %v, %v; want nil, nil", r, err)
	}
	if b.DualWrite() {
		t.Error("DualWrite() in no transition")
	}
}

// TestOpenInMemory: without etcd the bitmaps are in memory: nothing stored,
// so nothing to repair or carry over.
func TestOpenInMemory(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	b, err := ipallocator.Open(ctx, ipallocator.Config{
		Model: model.Bitmap, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.BitmapStores(); got != nil {
		t.Errorf("BitmapStores() = %v, want nil", got)
	}
	if r, err := b.Repair(ipallocator.RepairConfig{}); r != nil || err != nil {
		t.Errorf("Repair() = %v, %v; want nil, nil", r, err)
	}
	if rep, err := b.CarryOver(ctx); rep != nil || err != nil {
		t.Errorf("CarryOver() = %v, %v; want nil, nil", rep, err)
	}
	if _, err := b.Allocators()[0].AllocateNext(ctx, allocation.Owner{Namespace: "default", Name: "a"}); err != nil {
		t.Errorf("AllocateNext: %v", err)
	}
}

// TestOpenRefuses: the model's name and its needs are checked at open, with
// an error naming what is wrong.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	v4 := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	tests := []struct {
		name string
		cfg  ipallocator.Config
		is   error
	}{
		{"auto is not a model to run", ipallocator.Config{Model: model.Auto, Prefixes: v4}, ipallocator.ErrUnknownModel},
		{"an unknown name", ipallocator.Config{Model: "bitmaps", Prefixes: v4}, ipallocator.ErrUnknownModel},
		{"no range", ipallocator.Config{Model: model.Bitmap}, nil},
		{"ipaddress without a client", ipallocator.Config{Model: model.IPAddress, Prefixes: v4}, nil},
		{"a bitmap wider than its window", ipallocator.Config{Model: model.Bitmap, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ipallocator.Open(ctx, tt.cfg)
			if err == nil {
				t.Fatalf("Open = %v, want an error", b)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %q", err, tt.is)
			}
		})
	}
}
