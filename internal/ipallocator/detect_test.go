package ipallocator_test

import (
	"context"
	"testing"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestDetect runs on a real etcd: no map is the IPAddress model, either
// family's map is the bitmap model, and a named model is kept as given.
func TestDetect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	etcd := etcdtest.New(t)
	kv := etcd.Client()
	const prefix = "/registry"
	detect := func(n model.Name) model.Name {
		t.Helper()
		got, err := ipallocator.Detect(ctx, n, kv, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := detect(model.Auto); got != model.IPAddress {
		t.Errorf("no map: %q, want ipaddress", got)
	}
	if got, _ := ipallocator.Detect(ctx, model.Auto, nil, prefix); got != model.IPAddress {
		t.Errorf("no etcd: %q, want ipaddress", got)
	}
	l := etcdlayout.Layout{Prefix: prefix}
	if _, err := kv.Put(ctx, l.SecondaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	if got := detect(model.Auto); got != model.Bitmap {
		t.Errorf("secondary map only: %q, want bitmap", got)
	}
	if got := detect(model.IPAddress); got != model.IPAddress {
		t.Errorf("named model changed to %q", got)
	}
	if _, err := kv.Delete(ctx, l.SecondaryServiceIPRange()); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, l.PrimaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	if found, err := clusterip.IPMapExists(ctx, kv, l); err != nil || !found {
		t.Errorf("primary map: %v, %v", found, err)
	}
	if found, err := clusterip.IPMapExists(ctx, kv, etcdlayout.Layout{Prefix: "/other"}); err != nil || found {
		t.Errorf("another prefix: %v, %v", found, err)
	}
}
