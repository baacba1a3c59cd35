package servicecidr

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
)

// BenchmarkConditions computes the conditions of one ServiceCIDR holding
// n IPAddresses, each a Service's, from an informer's indexer as the
// controller does (the periodic re-check of every ServiceCIDR): a /12 at a
// million Services holds 900,000.
//
//	go test ./pkg/ipaddress/servicecidr -run '^$' -bench BenchmarkConditions -benchmem
func BenchmarkConditions(b *testing.B) {
	for _, n := range []int{10_000, 250_000} {
		b.Run(fmt.Sprintf("ipaddresses=%d", n), func(b *testing.B) {
			prefix := netip.MustParsePrefix("10.96.0.0/12")
			indexer := indexedIPAddresses(b, prefix, n)
			sc := testCIDR("kubernetes", nil, prefix.String())
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := conditionsFromCache(indexer, sc, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// indexedIPAddresses is an IPAddress informer's indexer, with the address
// index, holding n IPAddresses inside prefix (from its second address on),
// each held by a Service of its own.
func indexedIPAddresses(b *testing.B, prefix netip.Prefix, n int) cache.Indexer {
	b.Helper()
	// Never started: the objects go into its indexer directly.
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &networkingv1.IPAddress{}, 0, cache.Indexers{})
	if err := addrindex.Add(inf); err != nil {
		b.Fatal(err)
	}
	indexer := inf.GetIndexer()
	addr := prefix.Addr().Next()
	for i := range n {
		ipa := &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: addr.String()},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
				Resource: "services", Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("svc-%d", i)}},
		}
		if err := indexer.Add(ipa); err != nil {
			b.Fatal(err)
		}
		addr = addr.Next()
	}
	return indexer
}
