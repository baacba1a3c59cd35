package ipaddress

import (
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// indexBenchAddrs is how many allocated addresses BenchmarkIndexBytes
// holds: a million Services' worth, 95% of an IPv4 /12.
const indexBenchAddrs = 1_000_000

// BenchmarkIndexBytes is what an allocator keeps in memory per allocated
// address at a million addresses, layer by layer, as the live heap each
// layer adds after a garbage collection (B/addr); ns/op is the time to
// build the layer, which a start-up pays once per family:
//
//   - freeindex/ipv4-12: the FreeIndex of an IPv4 /12, a bitmap over the
//     whole range (its cost is per range, divided here by the addresses
//     used);
//   - freeindex/ipv6-64: the FreeIndex of an IPv6 /64, a hashed set of the
//     used offsets;
//   - informer/ipaddress: the IPAddress informer's store as the server's
//     shared informer holds it: one object per address without
//     managedFields, under the namespace index and addrindex's.
//
// The server also holds each IPAddress in its watch cache (with
// managedFields) and each Service twice more (watch cache and informer);
// hack/scale.sh's heap profiles show those.
//
//	go test -run '^$' -bench BenchmarkIndexBytes -benchtime 1x -benchmem ./pkg/ipaddress/
func BenchmarkIndexBytes(b *testing.B) {
	v4 := subrange.MustNew(netip.MustParsePrefix("10.96.0.0/12"), model.IPAddress)
	v6 := subrange.MustNew(netip.MustParsePrefix("fd00:1::/64"), model.IPAddress)
	for _, c := range []struct {
		name  string
		build func(b *testing.B, n int) any
	}{
		{"freeindex/ipv4-12", func(b *testing.B, n int) any { return buildFreeIndex(b, v4, n) }},
		{"freeindex/ipv6-64", func(b *testing.B, n int) any { return buildFreeIndex(b, v6, n) }},
		{"informer/ipaddress", func(b *testing.B, n int) any { return buildIPAddressStore(b, v4, n) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var perAddr float64
			for b.Loop() {
				b.StopTimer()
				before := liveHeap()
				b.StartTimer()
				held := c.build(b, indexBenchAddrs)
				b.StopTimer()
				perAddr = float64(liveHeap()-before) / indexBenchAddrs
				runtime.KeepAlive(held)
				b.StartTimer()
			}
			b.ReportMetric(perAddr, "B/addr")
		})
	}
}

// liveHeap is the heap in use after a full garbage collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// buildFreeIndex marks the first n addresses of rng used.
func buildFreeIndex(b *testing.B, rng subrange.Range, n int) *FreeIndex {
	x, err := NewFreeIndex(rng)
	if err != nil {
		b.Fatal(err)
	}
	ip := rng.First()
	for range n {
		if !x.Set(ip) {
			b.Fatalf("set %s: out of range or used", ip)
		}
		ip = ip.Next()
	}
	return x
}

// buildIPAddressStore fills the store of an IPAddress informer, with the
// server's indexes, with n objects for the first n addresses of rng, each
// as the informer holds it: its strings and maps its own, no
// managedFields.
func buildIPAddressStore(b *testing.B, rng subrange.Range, n int) cache.Indexer {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &networkingv1.IPAddress{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := addrindex.Add(inf); err != nil {
		b.Fatal(err)
	}
	store := inf.GetIndexer()
	created := metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	ip := rng.First()
	for i := range n {
		owner := allocation.Owner{Namespace: "scale", Name: fmt.Sprintf("s-%06d", i), UID: string(fakeUID(i, 's'))}
		obj := NewObject(ip, owner)
		obj.UID = fakeUID(i, 'a')
		obj.ResourceVersion = strconv.Itoa(1_000_000 + 2*i)
		obj.CreationTimestamp = created
		if err := store.Add(obj); err != nil {
			b.Fatal(err)
		}
		ip = ip.Next()
	}
	return store
}

// fakeUID is a UID of the length and form the API server writes, distinct
// for each (i, kind).
func fakeUID(i int, kind byte) types.UID {
	return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%c%011x", i, kind, i))
}
