package addrindex

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// newInformer returns an IPAddress informer, never started, holding names,
// with the index added when indexed.
func newInformer(t testing.TB, indexed bool, names ...string) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &networkingv1.IPAddress{}, 0, cache.Indexers{})
	if indexed {
		if err := Add(inf); err != nil {
			t.Fatal(err)
		}
		if err := Add(inf); err != nil {
			t.Fatalf("a second Add: %v", err)
		}
	}
	for _, n := range names {
		if err := inf.GetIndexer().Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	return inf
}

func names(objs []*networkingv1.IPAddress) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	slices.Sort(out)
	return out
}

// sameAddresses checks that Addresses finds the addresses of the
// IPAddresses In found (want: their names).
func sameAddresses(t *testing.T, inf cache.SharedIndexInformer, prefixes []netip.Prefix, want []string) {
	t.Helper()
	addrs, err := Addresses(inf.GetIndexer(), prefixes, netip.ParseAddr)
	if err != nil {
		t.Fatal(err)
	}
	var got, wantAddrs []string
	for _, a := range addrs {
		got = append(got, a.String())
	}
	for _, n := range want {
		wantAddrs = append(wantAddrs, netip.MustParseAddr(n).String()) // a name In found parses
	}
	slices.Sort(got)
	slices.Sort(wantAddrs)
	if diff := cmp.Diff(wantAddrs, got); diff != "" {
		t.Errorf("Addresses(%v) differs from In (-In +Addresses):\n%s", prefixes, diff)
	}
}

// scan is the reference: every cached name inside one of prefixes.
func scan(inf cache.SharedIndexInformer, prefixes []netip.Prefix) []string {
	var out []string
	for _, obj := range inf.GetIndexer().List() {
		ipa := obj.(*networkingv1.IPAddress)
		addr, err := netip.ParseAddr(ipa.Name)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.IsValid() && p.Contains(addr) }) {
			out = append(out, ipa.Name)
		}
	}
	slices.Sort(out)
	return out
}

func TestIn(t *testing.T) {
	t.Parallel()
	stored := []string{
		"10.96.0.1", "10.96.0.255", "10.96.1.0", "10.96.255.254", "10.97.0.1", "192.168.0.10",
		"fd00::1", "fd00::ffff", "fd00::1:0", "fd00:0:0:1::5", "2001:db8::1",
		"255.255.255.255", "0.0.0.0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"not-an-address", "10.96.0.01", "::ffff:10.96.0.7", "fe80::1%eth0",
	}
	cases := []struct {
		name     string
		prefixes []string
		want     []string
	}{
		{"one block", []string{"10.96.0.0/24"}, []string{"10.96.0.1", "10.96.0.255"}},
		{"inside a block", []string{"10.96.0.0/28"}, []string{"10.96.0.1"}},
		{"several blocks", []string{"10.96.0.0/16"}, []string{"10.96.0.1", "10.96.0.255", "10.96.1.0", "10.96.255.254"}},
		{"overlapping prefixes, each address once", []string{"10.96.0.0/16", "10.96.0.0/24", "10.96.1.0/24"}, []string{"10.96.0.1", "10.96.0.255", "10.96.1.0", "10.96.255.254"}},
		{"wide IPv4, scanned", []string{"10.0.0.0/8"}, []string{"10.96.0.1", "10.96.0.255", "10.96.1.0", "10.96.255.254", "10.97.0.1"}},
		{"everything IPv4", []string{"0.0.0.0/0"}, []string{"0.0.0.0", "10.96.0.1", "10.96.0.255", "10.96.1.0", "10.96.255.254", "10.97.0.1", "192.168.0.10", "255.255.255.255"}},
		{"IPv6 block", []string{"fd00::/112"}, []string{"fd00::1", "fd00::ffff"}},
		{"IPv6 /108", []string{"fd00::/108"}, []string{"fd00::1", "fd00::1:0", "fd00::ffff"}},
		{"IPv6 /64, scanned", []string{"fd00::/64"}, []string{"fd00::1", "fd00::1:0", "fd00::ffff"}},
		{"IPv6 /48, scanned", []string{"fd00::/48"}, []string{"fd00:0:0:1::5", "fd00::1", "fd00::1:0", "fd00::ffff"}},
		{"the last block", []string{"255.255.255.0/24", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:0/100"}, []string{"255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}},
		{"dual stack", []string{"10.96.0.0/24", "fd00::/112"}, []string{"10.96.0.1", "10.96.0.255", "fd00::1", "fd00::ffff"}},
		{"a host prefix", []string{"192.168.0.10/32"}, []string{"192.168.0.10"}},
		{"not masked", []string{"10.96.0.77/24"}, []string{"10.96.0.1", "10.96.0.255"}},
		{"nothing there", []string{"172.16.0.0/12"}, nil},
		{"no prefixes", nil, nil},
		{"an invalid prefix selects nothing", []string{""}, nil},
	}
	for _, indexed := range []bool{true, false} {
		inf := newInformer(t, indexed, stored...)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/indexed=%v", tc.name, indexed), func(t *testing.T) {
				var prefixes []netip.Prefix
				for _, text := range tc.prefixes {
					p, _ := netip.ParsePrefix(text) // "" gives the invalid zero Prefix
					prefixes = append(prefixes, p)
				}
				got, err := In(inf.GetIndexer(), prefixes)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, names(got)); diff != "" {
					t.Errorf("In(%v) (-want +got):\n%s", tc.prefixes, diff)
				}
				if diff := cmp.Diff(scan(inf, prefixes), names(got)); diff != "" {
					t.Errorf("In(%v) differs from a scan (-scan +In):\n%s", tc.prefixes, diff)
				}
				sameAddresses(t, inf, prefixes, names(got))
			})
		}
	}
}

// TestInFollowsChanges checks the index after deletes and updates: an
// address deleted is no longer found, one added is.
func TestInFollowsChanges(t *testing.T) {
	t.Parallel()
	inf := newInformer(t, true, "10.96.0.1", "10.96.0.2")
	idx := inf.GetIndexer()
	if err := idx.Delete(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if err := idx.Update(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.2", Labels: map[string]string{"x": "y"}}}); err != nil {
		t.Fatal(err)
	}
	if err := idx.Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.3"}}); err != nil {
		t.Fatal(err)
	}
	got, err := In(idx, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.2", "10.96.0.3"}, names(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	sameAddresses(t, inf, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}, names(got))
}

// TestAddToRunningIndexer checks that an index added after objects are
// stored covers them (a consumer built after the shared informer started).
func TestAddToRunningIndexer(t *testing.T) {
	t.Parallel()
	inf := newInformer(t, false, "10.96.0.1", "fd00::1")
	if err := Add(inf); err != nil {
		t.Fatal(err)
	}
	objs, err := inf.GetIndexer().ByIndex(Name, "10.96.0.0/24")
	if err != nil || len(objs) != 1 {
		t.Fatalf("ByIndex after a late Add: %d objects, %v", len(objs), err)
	}
}

// TestInRandom compares In with a scan over random addresses and prefixes
// of every length, both families.
func TestInRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("400 random rounds over 3,000 addresses; runs in the full suite")
	}
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	var stored []string
	for range 3000 {
		stored = append(stored, randomAddr(r).String())
	}
	inf := newInformer(t, true, stored...)
	for i := range 400 {
		var prefixes []netip.Prefix
		for range 1 + r.IntN(3) {
			a := netip.MustParseAddr(stored[r.IntN(len(stored))])
			p, _ := a.Prefix(r.IntN(a.BitLen() + 1))
			prefixes = append(prefixes, p)
		}
		got, err := In(inf.GetIndexer(), prefixes)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(scan(inf, prefixes), names(got)); diff != "" {
			t.Fatalf("round %d, In(%v) differs from a scan (-scan +In):\n%s", i, prefixes, diff)
		}
		sameAddresses(t, inf, prefixes, names(got))
	}
}

// randomAddr returns addresses clustered in a few networks, so prefixes
// of every length hold some.
func randomAddr(r *rand.Rand) netip.Addr {
	if r.IntN(2) == 0 {
		return netip.AddrFrom4([4]byte{10, byte(96 + r.IntN(2)), byte(r.IntN(4)), byte(r.IntN(256))})
	}
	return netip.AddrFrom16([16]byte{0: 0xfd, 7: byte(r.IntN(2)), 13: byte(r.IntN(3)), 14: byte(r.IntN(256)), 15: byte(r.IntN(256))})
}

func FuzzIn(f *testing.F) {
	f.Add("10.96.0.1", "10.96.0.0", 24)
	f.Add("fd00::1", "fd00::", 100)
	f.Add("255.255.255.255", "255.0.0.0", 9)
	f.Fuzz(func(t *testing.T, name, base string, bits int) {
		addr, err := netip.ParseAddr(base)
		if err != nil {
			return
		}
		p, err := addr.Prefix(bits)
		if err != nil {
			return
		}
		inf := newInformer(t, true, name, "10.96.0.1", "fd00::1")
		got, err := In(inf.GetIndexer(), []netip.Prefix{p})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(scan(inf, []netip.Prefix{p}), names(got)); diff != "" {
			t.Fatalf("In(%v) differs from a scan (-scan +In):\n%s", p, diff)
		}
		sameAddresses(t, inf, []netip.Prefix{p}, names(got))
	})
}
