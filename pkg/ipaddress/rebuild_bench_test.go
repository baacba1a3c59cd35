package ipaddress

import (
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
// exist already: what the rebuild loop pays, at most every 50 ms, while
// ServiceCIDRs are created.
//
//	go test -run '^$' -bench BenchmarkRebuild -benchmem ./pkg/ipaddress/
func BenchmarkRebuild(b *testing.B) {
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
	b.ReportAllocs()
	for b.Loop() {
		a.rebuildLocked()
	}
}

// prefixOfIndex is test/scale's i-th IPv6 /112: fd00:1::<i>:0/112.
func prefixOfIndex(i int) netip.Prefix {
	var a [16]byte
	a[0], a[1], a[3] = 0xfd, 0x00, 0x01
	a[12], a[13] = byte(i>>8), byte(i)
	return netip.PrefixFrom(netip.AddrFrom16(a), 112)
}
