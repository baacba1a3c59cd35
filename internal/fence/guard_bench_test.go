package fence

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// BenchmarkGuardedCreate creates keys as the Services' store does, through
// an in-process etcd member (as `allocator serve` calls its embedded one),
// without a fence, and with one fence per create (a request's) as Guard and
// GuardClaims write them, 16 creates at a time per CPU. cpu-µs/op is the
// process's CPU per create, etcd's included: what a fenced write costs the
// server, without the rest of a request around it (docs/performance.md).
func BenchmarkGuardedCreate(b *testing.B) {
	ctx := context.Background()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(etcd.Close)
	c := etcd.InProcessClient()
	b.Cleanup(func() { _ = c.Close() })
	kc := &kubernetes.Client{Client: c}
	kc.Kubernetes = kc
	value := make([]byte, 600) // about a Service's protobuf
	var run atomic.Int64
	for _, bc := range []struct {
		name   string
		fenced bool
		guard  kubernetes.Interface
	}{{"plain", false, kc}, {"fenced", true, Guard(kc, NewLeases(c, etcdlayout.Layout{}, 0))}, {"claims", true, GuardClaims(kc, NewLeases(c, etcdlayout.Layout{}, 0))}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			prefix := fmt.Sprintf("/registry/services/specs/bench%d/", run.Add(1))
			var n atomic.Int64
			b.SetParallelism(16)
			cpu0 := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := prefix + fmt.Sprint(n.Add(1))
					wctx := ctx
					if bc.fenced {
						wctx = NewContext(ctx, New(etcdlayout.Layout{}))
					}
					resp, err := bc.guard.OptimisticPut(wctx, key, value, 0, kubernetes.PutOptions{})
					if err != nil || !resp.Succeeded {
						b.Errorf("create %s: %+v, %v", key, resp, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time (user and system) the process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
