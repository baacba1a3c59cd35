package apiserver

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/ipaddress"
)

// TestDeletedHint: the hint over the index of ServiceCIDRs being deleted
// answers what a scan of every ServiceCIDR answers (ipaddress.DeletedHolders),
// for ServiceCIDRs ready, not ready and being deleted, overlapping or not,
// and addresses inside and outside them; it reads every ServiceCIDR only
// when one being deleted holds the address. Without the index it answers
// the same from the scan.
func TestDeletedHint(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	deleted := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for round := range 300 {
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{deletingIndex: indexDeleting})
		var cidrs []*networkingv1.ServiceCIDR
		for i := range 1 + r.IntN(8) {
			sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)},
				Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{fmt.Sprintf("10.0.%d.0/%d", r.IntN(4), 23+r.IntN(3))}}}
			switch r.IntN(3) {
			case 1:
				sc.DeletionTimestamp = &deleted
			case 2:
				sc.Status.Conditions = []metav1.Condition{{Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionFalse}}
			}
			if err := indexer.Add(sc); err != nil {
				t.Fatal(err)
			}
			cidrs = append(cidrs, sc)
		}
		var deleting []*networkingv1.ServiceCIDR
		for _, sc := range cidrs {
			if sc.DeletionTimestamp != nil {
				deleting = append(deleting, sc)
			}
		}
		reads := 0
		all := func() ([]*networkingv1.ServiceCIDR, error) { reads++; return cidrs, nil }
		indexed := deletedHint(func() ([]any, error) { return indexer.ByIndex(deletingIndex, deletingIndex) }, all)
		scanned := deletedHint(nil, all)
		for range 20 {
			ip := netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(5)), byte(r.IntN(256))})
			want := ""
			if names := ipaddress.DeletedHolders(cidrs, ip); len(names) > 0 {
				want = ipaddress.DeletedWarning(ip, names)
			}
			before := reads
			if got := indexed(ip); got != want {
				t.Fatalf("round %d, %s: %q, want %q", round, ip, got, want)
			}
			if reads != before && len(ipaddress.DeletedHolders(deleting, ip)) == 0 {
				t.Fatalf("round %d, %s: read every ServiceCIDR for an address none being deleted holds", round, ip)
			}
			if got := scanned(ip); got != want {
				t.Fatalf("round %d, %s without the index: %q, want %q", round, ip, got, want)
			}
		}
	}
}

// BenchmarkStaticHint is one user-chosen ClusterIP's hint at 10,000
// ServiceCIDRs, none being deleted (the common case), for an address of the
// last one.
func BenchmarkStaticHint(b *testing.B) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{deletingIndex: indexDeleting})
	var cidrs []*networkingv1.ServiceCIDR
	for i := range 10000 {
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{fmt.Sprintf("fd00:%x::/112", i)}}}
		if err := indexer.Add(sc); err != nil {
			b.Fatal(err)
		}
		cidrs = append(cidrs, sc)
	}
	all := func() ([]*networkingv1.ServiceCIDR, error) { return cidrs, nil }
	ip := netip.MustParseAddr("fd00:270f::10")
	for name, hint := range map[string]func(netip.Addr) string{
		"indexed": deletedHint(func() ([]any, error) { return indexer.ByIndex(deletingIndex, deletingIndex) }, all),
		"scanned": deletedHint(nil, all),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if hint(ip) != "" {
					b.Fatal("a warning")
				}
			}
		})
	}
}
