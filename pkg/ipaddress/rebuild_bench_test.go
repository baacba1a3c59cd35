package ipaddress

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
)

// BenchmarkRebuild is one rebuild of the IPv6 ranges over 10,000 ready
// ServiceCIDRs (test/scale's IPv6 /112s and the default one) whose indexes
// exist already: what the first build costs, and a change no event names.
//
//	go test -run '^$' -bench 'BenchmarkRebuild|BenchmarkServiceCIDREvent' -benchmem ./pkg/ipaddress/
func BenchmarkRebuild(b *testing.B) {
	a, _ := scaleAllocator(b)
	b.ReportAllocs()
	for b.Loop() {
		a.rebuildLocked()
	}
}

// BenchmarkServiceCIDREvent is what one ServiceCIDR event costs the same
// allocator: an op is three applies, the creation of the newest
// ServiceCIDR, the deletion of one in the middle of the allocation order
// and its creation again.
func BenchmarkServiceCIDREvent(b *testing.B) {
	a, cidrs := scaleAllocator(b)
	middle, err := a.cidrLister.Get("scale-05000")
	if err != nil {
		b.Fatal(err)
	}
	newest := serviceCIDR("newest", 0, prefixOfIndex(20_000).String())
	b.ReportAllocs()
	for b.Loop() {
		for _, step := range []struct {
			name string
			do   func() error
		}{
			{"newest", func() error { return cidrs.Add(newest) }},
			{"scale-05000", func() error { return cidrs.Delete(middle) }},
			{"scale-05000", func() error { return cidrs.Add(middle) }},
		} {
			if err := step.do(); err != nil {
				b.Fatal(err)
			}
			a.applyLocked([]string{step.name})
		}
		b.StopTimer()
		if err := cidrs.Delete(newest); err != nil {
			b.Fatal(err)
		}
		a.applyLocked([]string{"newest"})
		b.StartTimer()
	}
	if len(a.ranges) != 10_001 {
		b.Fatalf("%d ranges, want 10,001", len(a.ranges))
	}
}

// scaleAllocator is an IPv6 allocator over test/scale's 10,000 ServiceCIDRs
// and the default one, built, and the cache of its ServiceCIDRs.
func scaleAllocator(b *testing.B) (*Allocator, cache.Indexer) {
	cidrs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := cidrs.Add(serviceCIDR("kubernetes", 2*time.Hour, "10.96.0.0/12", "fd00::/112")); err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		sc := serviceCIDR(fmt.Sprintf("scale-%05d", i), time.Hour-time.Duration(i)*time.Second, prefixOfIndex(i).String())
		if err := cidrs.Add(sc); err != nil {
			b.Fatal(err)
		}
	}
	ips := cache.NewSharedIndexInformer(&cache.ListWatch{}, &networkingv1.IPAddress{}, 0, cache.Indexers{})
	if err := addrindex.Add(ips); err != nil {
		b.Fatal(err)
	}
	a := &Allocator{
		ipv6:       true,
		logger:     klog.Background(),
		ipIndexer:  ips.GetIndexer(),
		cidrLister: networkinglisters.NewServiceCIDRLister(cidrs),
		inflight:   map[netip.Addr]*reservation{},
		unobserved: map[netip.Addr]bool{},
	}
	a.rebuildLocked()
	if len(a.ranges) != 10_001 {
		b.Fatalf("%d ranges, want 10,001", len(a.ranges))
	}
	return a, cidrs
}

// prefixOfIndex is test/scale's i-th IPv6 /112: fd00:1::<i>:0/112.
func prefixOfIndex(i int) netip.Prefix {
	var a [16]byte
	a[0], a[1], a[3] = 0xfd, 0x00, 0x01
	a[12], a[13] = byte(i>>8), byte(i)
	return netip.PrefixFrom(netip.AddrFrom16(a), 112)
}

// BenchmarkUsage is one Usage of the same allocator: the metrics' read of
// the family's size and fill, which counts only the ranges inside no
// other (maximalLocked).
func BenchmarkUsage(b *testing.B) {
	a, _ := scaleAllocator(b)
	a.ready.Store(true)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Usage(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
