package clusterip

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap"
)

// BenchmarkEtcdAllocateNext measures allocations per second against a real
// embedded etcd on a /16, with 1, 8 and 32 concurrent callers, with and
// without group commit. Every iteration is one AllocateNext; a /16 holds
// 65,534 addresses, so run it with -benchtime=Nx, N ≤ 60000 (go test -run '^$'
// -bench EtcdAllocateNext -benchtime=50000x ./pkg/bitmap/clusterip). It
// reports allocs/s, the average batch size and the bytes written per
// allocation.
func BenchmarkEtcdAllocateNext(b *testing.B) {
	etcd := etcdtest.New(b)
	for _, batching := range []bool{false, true} {
		for _, callers := range []int{1, 8, 32} {
			name := fmt.Sprintf("batching=%v/callers=%d", batching, callers)
			b.Run(name, func(b *testing.B) {
				benchmarkAllocateNext(b, etcd, "10.0.0.0/16", callers, bitmap.EtcdOptions{DisableBatching: !batching})
			})
		}
	}
}

// BenchmarkEtcdAllocateNextSlash12 is the same with the largest bitmap the
// model serves (1,048,574 addresses, a 128 KiB value per write).
func BenchmarkEtcdAllocateNextSlash12(b *testing.B) {
	etcd := etcdtest.New(b)
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("batching=true/callers=%d", callers), func(b *testing.B) {
			benchmarkAllocateNext(b, etcd, "10.0.0.0/12", callers, bitmap.EtcdOptions{})
		})
	}
}

func benchmarkAllocateNext(b *testing.B, etcd *etcdtest.Etcd, cidr string, callers int, opts bitmap.EtcdOptions) {
	ctx := context.Background()
	a := newEtcdAllocator(b, etcd.NewClient(b), cidr, opts)
	if _, err := etcd.Client().Delete(ctx, testKey); err != nil {
		b.Fatal(err)
	}
	if _, err := a.Initialize(ctx); err != nil {
		b.Fatal(err)
	}
	if uint64(b.N) > a.Range().Size() {
		b.Fatalf("b.N = %d exceeds the %d addresses of %s: use -benchtime=Nx with a smaller N", b.N, a.Range().Size(), cidr)
	}
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := a.AllocateNext(ctx, owner); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	s := a.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
	b.ReportMetric(float64(s.Requests)/float64(max(s.Batches, 1)), "calls/batch")
	b.ReportMetric(float64(s.BytesWritten)/float64(b.N), "etcd-bytes/alloc")
	b.ReportMetric(float64(s.BytesWritten)/float64(max(s.Writes, 1)), "bytes/write")
}
