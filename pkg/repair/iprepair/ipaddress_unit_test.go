package iprepair

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

func TestIPAddressServiceCIDRsContains(t *testing.T) {
	t.Parallel()
	cidrs := newServiceCIDRs([]*networkingv1.ServiceCIDR{
		{Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24", "fd00::/120"}}},
		{Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"fd01::/48", "10.1.0.0/32", "not-a-cidr"}}},
	})
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"10.0.0.1", true},
		{"10.0.0.254", true},
		{"10.0.0.0", false},   // network address
		{"10.0.0.255", false}, // IPv4 broadcast
		{"10.0.1.1", false},
		{"10.1.0.0", false}, // a /32 has no usable address
		{"fd00::ff", true},  // the IPv6 last address is usable
		{"fd00::", false},
		{"fd01::1:2:3", true}, // a prefix the allocator refuses still covers its addresses
		{"fd01::", false},
	} {
		ip, ok := holding.ParseClusterIP(tc.ip)
		if !ok {
			t.Fatalf("parse %s", tc.ip)
		}
		if got := cidrs.contains(ip); got != tc.want {
			t.Errorf("contains(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

func TestIPAddressKeys(t *testing.T) {
	t.Parallel()
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type:       corev1.ServiceTypeClusterIP,
		ClusterIPs: []string{"::ffff:10.0.0.1", "FD00::0001", "bad", "10.0.0.1"},
	}}
	if diff := cmp.Diff([]string{"10.0.0.1", "fd00::1", "!bad"}, addressKeys(svc)); diff != "" {
		t.Errorf("addressKeys (-want +got):\n%s", diff)
	}
	keys := []string{"!bad", "fd00::1", "10.0.0.10", "10.0.0.9", "weird"}
	sortKeys(keys)
	if diff := cmp.Diff([]string{"10.0.0.9", "10.0.0.10", "fd00::1", "!bad", "weird"}, keys); diff != "" {
		t.Errorf("sortKeys (-want +got):\n%s", diff)
	}
	headless := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}}}
	if keys := addressKeys(headless); len(keys) != 0 {
		t.Errorf("headless Service keys %q", keys)
	}
}

// indexedServices returns an indexer with the repair's indexes and 3,000
// Services: dual-stack, headless, invalid, duplicated, IPv4-mapped, IPv6
// spelled in capitals, and dense blocks where every address is held.
func indexedServices(t *testing.T) cache.Indexer {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, serviceIndexers)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%d", i)}}
		switch i % 8 {
		case 0: // dual-stack
			svc.Spec.ClusterIPs = []string{
				netip.AddrFrom4([4]byte{10, 96, byte(rng.IntN(40)), byte(rng.IntN(256))}).String(),
				fmt.Sprintf("fd00::%x:%x", rng.IntN(4), rng.IntN(1<<16)),
			}
		case 1:
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		case 2:
			svc.Spec.ClusterIPs = []string{"not-an-ip"}
		case 3: // the same address as another Service
			svc.Spec.ClusterIPs = []string{"10.96.3.7"}
		case 4: // IPv4-mapped, held as its IPv4 address
			svc.Spec.ClusterIPs = []string{"::ffff:10.96.5." + fmt.Sprint(rng.IntN(256))}
		case 5: // every address of 10.97.0.0/24 and fd01::/120, IPv6 in capitals, clusterIP alone
			svc.Spec.ClusterIP = fmt.Sprintf("10.97.0.%d", i/8%256)
			if i/8 >= 256 {
				svc.Spec.ClusterIP = fmt.Sprintf("FD01::%X", i/8%256)
			}
		default:
			svc.Spec.ClusterIPs = []string{netip.AddrFrom4([4]byte{10, byte(96 + rng.IntN(2)), byte(rng.IntN(40)), byte(rng.IntN(256))}).String()}
		}
		if err := indexer.Add(svc); err != nil {
			t.Fatal(err)
		}
	}
	return indexer
}

// scanHolders returns, for each work key, the Services holding it: what
// the index answers, read from every Service.
func scanHolders(indexer cache.Indexer) map[string][]string {
	out := map[string][]string{}
	for _, obj := range indexer.List() {
		svc := obj.(*corev1.Service)
		for _, k := range addressKeys(svc) {
			out[k] = append(out[k], svc.Name)
		}
	}
	return out
}

func serviceNames(svcs []*corev1.Service) []string {
	var out []string
	for _, svc := range svcs {
		out = append(out, svc.Namespace+"/"+svc.Name)
	}
	return out
}

// TestHolders: the Services the index finds holding a key are those a
// scan of every Service finds, for every held key, for free addresses
// beside held ones, and for keys that are no work key.
func TestHolders(t *testing.T) {
	t.Parallel()
	indexer := indexedServices(t)
	view := &informerView{serviceIndexer: indexer}
	want := scanHolders(indexer)
	keys := []string{"10.97.1.1", "10.96.99.1", "fd00::4:0", "FD01::1", "fd01::1%eth0", "::ffff:10.97.0.1",
		"10.97.0.0/28", "!", "!10.97.0.1", "no-address", ""}
	for k := range want {
		keys = append(keys, k)
	}
	if len(want["10.96.3.7"]) < 2 || len(want["!not-an-ip"]) < 2 || len(want["fd01::10"]) != 1 || len(want["10.97.0.5"]) != 1 {
		t.Fatalf("the test's data lacks a case: %d keys", len(want))
	}
	for _, k := range keys {
		svcs, err := view.holders(k)
		if err != nil {
			t.Fatalf("holders(%q): %v", k, err)
		}
		var got []string
		for _, svc := range svcs {
			got = append(got, svc.Name)
		}
		slices.Sort(got)
		slices.Sort(want[k])
		if diff := cmp.Diff(want[k], got); diff != "" {
			t.Errorf("holders(%q) (-scan +index):\n%s", k, diff)
		}
	}
	// A pass's chunk reads them through a view that keeps a block's
	// holders: the same Services in the same order, whatever order the
	// keys come in (sorted, as a pass's do, and the order above).
	sorted := slices.Clone(keys)
	sortKeys(sorted)
	for _, order := range [][]string{sorted, keys} {
		chunk := chunkView(view)
		for _, k := range order {
			direct, err := view.holders(k)
			if err != nil {
				t.Fatal(err)
			}
			remembered, err := chunk.holders(k)
			if err != nil {
				t.Fatalf("a chunk's holders(%q): %v", k, err)
			}
			if diff := cmp.Diff(serviceNames(direct), serviceNames(remembered)); diff != "" {
				t.Errorf("a chunk's holders(%q) (-informer view +chunk's view):\n%s", k, diff)
			}
		}
	}
	heldKeys := view.heldKeys()
	sortKeys(heldKeys)
	var scanned []string
	for k := range want {
		scanned = append(scanned, k)
	}
	sortKeys(scanned)
	if diff := cmp.Diff(scanned, slices.Compact(heldKeys)); diff != "" {
		t.Errorf("heldKeys (-scan +got):\n%s", diff)
	}
}

// TestHeldInside: the addresses the cached Services hold inside prefixes,
// found through the block index, are those a parse of every Service's
// addresses finds, for prefixes inside one block, across blocks, and wider
// than addrindex.MaxBlocks (a scan).
func TestHeldInside(t *testing.T) {
	t.Parallel()
	indexer := indexedServices(t)
	view := &informerView{serviceIndexer: indexer}
	held := scanHolders(indexer)
	scan := func(prefixes []netip.Prefix) []string {
		var out []string
		for k := range held {
			ip, err := netip.ParseAddr(k)
			if err == nil && slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, set := range [][]string{
		{"10.96.5.0/24"}, {"10.96.3.0/28"}, {"10.96.3.4/30"}, {"10.96.0.0/20"}, {"10.96.0.0/16", "10.96.5.0/24"}, {"10.96.0.0/15"},
		{"10.0.0.0/8"}, {"0.0.0.0/0"}, {"10.97.0.0/24"}, {"fd01::/120"}, {"fd00::/112"}, {"fd00::/110"}, {"fd00::/64"}, {"192.168.0.0/24"}, {},
	} {
		var prefixes []netip.Prefix
		for _, text := range set {
			prefixes = append(prefixes, netip.MustParsePrefix(text))
		}
		got, want := view.heldInside(prefixes), scan(prefixes)
		if len(set) > 0 && set[0] != "192.168.0.0/24" && len(want) == 0 {
			t.Fatalf("no Service holds an address in %v: the test's data is wrong", set)
		}
		slices.Sort(got)
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("heldInside(%v) (-scan +got):\n%s", set, diff)
		}
	}
}

// TestInformerViewKeys: the keys of a pass are every held key and every
// IPAddress's name, each once, in sortKeys order, whether a held address
// has its IPAddress or not, and for IPAddresses no Service holds.
func TestInformerViewKeys(t *testing.T) {
	t.Parallel()
	services := indexedServices(t)
	ips := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	held := scanHolders(services)
	want := []string{"10.99.0.1", "fd99::1", "weird"} // no Service holds these
	for _, name := range want {
		if err := ips.Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	for k := range held {
		want = append(want, k)
		if _, err := netip.ParseAddr(k); err != nil || i%3 == 0 { // one in three held addresses without its IPAddress
			i++
			continue
		}
		i++
		if err := ips.Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: k}}); err != nil {
			t.Fatal(err)
		}
	}
	sortKeys(want)
	view := &informerView{serviceIndexer: services, ipIndexer: ips}
	got, err := view.keys()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

// TestInformerViewPassWorkers: a dry-run pass over the server's view, the
// informers' caches, finds on four workers what it finds on one, in the
// same order, the addresses' (run under -race, the view read from several
// goroutines).
func TestInformerViewPassWorkers(t *testing.T) {
	t.Parallel()
	services := indexedServices(t)
	ips := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	i := 0
	for k := range scanHolders(services) {
		if i++; i%3 != 0 { // two in three held addresses with an IPAddress, none its owner's
			if err := ips.Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: k}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cidrs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := cidrs.Add(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/16", "fd00::/64"}}}); err != nil {
		t.Fatal(err)
	}
	view := &informerView{serviceIndexer: services, serviceLister: corelisters.NewServiceLister(services),
		ipIndexer: ips, cidrLister: networkinglisters.NewServiceCIDRLister(cidrs)}
	pass := func(workers int) []report.Problem {
		r, err := NewIPAddressRepair(IPAddressConfig{Workers: workers, Options: repair.Options{Client: fake.NewClientset(), DryRun: true}})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := r.pass(context.Background(), view)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Problems
	}
	one := pass(1)
	if len(one) < 1000 {
		t.Fatalf("one worker found %d problems; the view should give thousands", len(one))
	}
	var addrs []netip.Addr // the problems' addresses, in key order
	for _, p := range one {
		if ip, err := netip.ParseAddr(p.IP); err == nil {
			addrs = append(addrs, ip)
		}
	}
	if !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
		t.Errorf("one worker's problems are not in address order")
	}
	if diff := cmp.Diff(one, pass(4)); diff != "" {
		t.Errorf("four workers against one (-one +four):\n%s", diff)
	}
}
