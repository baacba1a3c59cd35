package iprepair

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// benchServices returns n Services holding consecutive addresses of
// 10.96.0.0/12, one in ten an IPv6 address of fd00::/112 instead: the
// shape of hack/scale.sh's fill.
func benchServices(n int) []*corev1.Service {
	svcs := make([]*corev1.Service, n)
	for i := range svcs {
		ip := netip.AddrFrom4([4]byte{10, 96 + byte(i>>16), byte(i >> 8), byte(i)})
		if i%10 == 0 {
			ip = netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)})
		}
		svcs[i] = &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: fmt.Sprintf("s-%07d", i)},
			Spec:       corev1.ServiceSpec{ClusterIP: ip.String(), ClusterIPs: []string{ip.String()}},
		}
	}
	return svcs
}

// benchServiceIndexer is a Service store with the repair's indexes holding
// benchServices(n).
func benchServiceIndexer(b *testing.B, n int) cache.Indexer {
	b.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, serviceIndexers)
	for _, svc := range benchServices(n) {
		if err := indexer.Add(svc); err != nil {
			b.Fatal(err)
		}
	}
	return indexer
}

// BenchmarkServiceIndexBytes measures what the repair's indexes add to the
// Service informer's store, in bytes per Service, over the store with the
// namespace index alone.
//
//	go test ./pkg/repair/iprepair -run '^$' -bench BenchmarkServiceIndexBytes -benchtime 1x
func BenchmarkServiceIndexBytes(b *testing.B) {
	const n = 200_000
	svcs := benchServices(n)
	held := func(indexers cache.Indexers) int64 {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
		for _, svc := range svcs {
			if err := indexer.Add(svc); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(indexer)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc)
	}
	nsOnly := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	withRepair := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for name, f := range serviceIndexers {
		withRepair[name] = f
	}
	for b.Loop() {
		base := held(nsOnly)
		b.ReportMetric(float64(held(withRepair)-base)/n, "B/service")
	}
}

// BenchmarkHolders measures one lookup of an address's holders in a dense
// block: 16 Services checked for each.
func BenchmarkHolders(b *testing.B) {
	indexer := benchServiceIndexer(b, 100_000)
	view := &informerView{serviceIndexer: indexer}
	b.ReportAllocs()
	for b.Loop() {
		if svcs, err := view.holders("10.96.1.7"); err != nil || len(svcs) != 1 {
			b.Fatalf("holders: %d, %v", len(svcs), err)
		}
	}
}

// BenchmarkPassHolders measures the holders of every held address of
// 100,000 Services, dense blocks, in a pass's order (its keys sorted),
// read as informerView.holders reads them (every Service of the block for
// each address) and as a pass's chunk reads them (chunkView: once per
// block).
//
//	go test ./pkg/repair/iprepair -run '^$' -bench BenchmarkPassHolders -benchmem
func BenchmarkPassHolders(b *testing.B) {
	indexer := benchServiceIndexer(b, 100_000)
	view := &informerView{serviceIndexer: indexer}
	keys := view.heldKeys()
	sortKeys(keys)
	for _, tc := range []struct {
		name string
		view func() ipView
	}{{"informer view", func() ipView { return view }}, {"chunk view", func() ipView { return chunkView(view) }}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := tc.view()
				for _, k := range keys {
					if svcs, err := v.holders(k); err != nil || len(svcs) != 1 {
						b.Fatalf("holders(%s): %d, %v", k, len(svcs), err)
					}
				}
			}
		})
	}
}

// BenchmarkInformerViewKeys measures the keys of a full pass over 200,000
// Services, each address with its IPAddress.
func BenchmarkInformerViewKeys(b *testing.B) {
	services := cache.NewIndexer(cache.MetaNamespaceKeyFunc, serviceIndexers)
	ips := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, svc := range benchServices(200_000) {
		if err := services.Add(svc); err != nil {
			b.Fatal(err)
		}
		if err := ips.Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: svc.Spec.ClusterIP}}); err != nil {
			b.Fatal(err)
		}
	}
	view := &informerView{serviceIndexer: services, ipIndexer: ips}
	b.ReportAllocs()
	for b.Loop() {
		if keys, err := view.keys(); err != nil || len(keys) != 200_000 {
			b.Fatalf("keys: %d, %v", len(keys), err)
		}
	}
}
