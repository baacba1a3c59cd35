package nodeport

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"

	"github.com/allocator/allocator/pkg/bitmap"
)

const key = "/registry/ranges/servicenodeports"

func open(t *testing.T, etcd *etcdtest.Etcd, spec string) *EtcdAllocator {
	t.Helper()
	a, err := NewEtcd(etcd.Client(), key, MustParse(spec), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOpenWritesKubeAPIServerBytes: the map created at start-up is the exact
// value kube-apiserver writes (both fixtures captured it).
func TestOpenWritesKubeAPIServerBytes(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	open(t, etcd, Default)
	resp, err := etcd.Client().Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v, %d kvs", key, err, len(resp.Kvs))
	}
	for _, name := range []string{fixtures.Bitmap132, fixtures.IPAddress136} {
		want, ok := fixtures.Load(t, name).Value(key)
		if !ok {
			t.Fatalf("%s has no %s", name, key)
		}
		if !bytes.Equal(resp.Kvs[0].Value, want) {
			t.Errorf("stored %q, %s holds %q", resp.Kvs[0].Value, name, want)
		}
	}
}

func TestAllocateErrorsAndBands(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	ctx := context.Background()
	a := open(t, etcd, "30000-30099") // 100 ports, static band 16
	if err := a.Allocate(ctx, 30080); err != nil {
		t.Fatal(err)
	}
	err := a.Allocate(ctx, 30080)
	if !errors.Is(err, ErrAllocated) || err.Error() != "provided port is already allocated" {
		t.Errorf("second Allocate(30080) = %v", err)
	}
	err = a.Allocate(ctx, 20000)
	if !errors.Is(err, ErrNotInRange) || err.Error() != "provided port is not in the valid range. The range of valid ports is 30000-30099" {
		t.Errorf("Allocate(20000) = %v", err)
	}
	if err := a.Release(ctx, 20000); err != nil {
		t.Errorf("Release out of range: %v", err)
	}
	// Dynamic: the 83 free ports of the upper band first, then the lower band.
	var got []int
	for range 99 {
		p, err := a.AllocateNext(ctx)
		if err != nil {
			t.Fatalf("AllocateNext after %d: %v", len(got), err)
		}
		got = append(got, p)
	}
	for i, p := range got {
		if upper := p >= 30016; upper != (i < 83) {
			t.Fatalf("allocation %d took port %d: upper band must be exhausted first", i, p)
		}
	}
	if slices.Contains(got, 30080) {
		t.Error("dynamic allocation took the static 30080 again")
	}
	if _, err := a.AllocateNext(ctx); !errors.Is(err, allocation.ErrFull) || err.Error() != "range is full" ||
		!strings.Contains(allocation.Hint(err), "the node-port range 30000-30099 (--service-node-port-range) has no free port") {
		t.Errorf("AllocateNext on a full range = %v (hint %q), want kube-apiserver's text and a hint naming the range", err, allocation.Hint(err))
	}
	// Another instance on the same key sees the same map (CAS, no cache lies).
	b := open(t, etcd, "30000-30099")
	if has, err := b.Has(ctx, 30080); err != nil || !has {
		t.Errorf("other instance Has(30080) = %v, %v", has, err)
	}
	if err := b.Release(ctx, 30080); err != nil {
		t.Fatal(err)
	}
	if err := a.DryRun().Allocate(ctx, 30080); err != nil {
		t.Errorf("dry-run Allocate(30080) after release elsewhere = %v", err)
	}
	if has, _ := a.Has(ctx, 30080); has {
		t.Error("dry-run allocation reserved 30080")
	}
	if err := a.Allocate(ctx, 30080); err != nil {
		t.Errorf("Allocate(30080) after release on another instance: %v", err)
	}
}

// TestRerange: a changed --service-node-port-range keeps the ports of both
// ranges and drops the others in the stored map.
func TestRerange(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	ctx := context.Background()
	a := open(t, etcd, Default)
	for _, p := range []int{30001, 31999, 32000} {
		if err := a.Allocate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewEtcd(etcd.Client(), key, MustParse("30000-31999"), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created, dropped, err := b.Open(ctx)
	if err != nil || created || !slices.Equal(dropped, []int{32000}) {
		t.Fatalf("Open on a new range = %v, %v, %v; want dropped [32000]", created, dropped, err)
	}
	var held []int
	if err := b.ForEach(ctx, func(p int) { held = append(held, p) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(held, []int{30001, 31999}) {
		t.Errorf("held after re-range %v, want [30001 31999]", held)
	}
	resp, err := etcd.Client().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil || ra.Range != "30000-31999" {
		t.Errorf("stored range %q, %v", ra.Range, err)
	}
	// The old instance now fails instead of overwriting the new map.
	if err := a.Allocate(ctx, 30002); !errors.Is(err, bitmap.ErrStoredRangeMismatch) {
		t.Errorf("allocation on the old range after re-range = %v, want ErrStoredRangeMismatch", err)
	}
}
