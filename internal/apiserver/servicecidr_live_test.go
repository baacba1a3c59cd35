package apiserver

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// matches reports whether name starts with (or, exact, is) one of texts.
func matches(texts []textPrefix, name string) bool {
	return slices.ContainsFunc(texts, func(t textPrefix) bool {
		if t.exact {
			return name == t.text
		}
		return strings.HasPrefix(name, t.text)
	})
}

func TestTextPrefixes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		want   []textPrefix
		ok     bool
	}{
		{"10.96.5.0/24", []textPrefix{{text: "10.96.5."}}, true},
		{"10.96.0.0/16", []textPrefix{{text: "10.96."}}, true},
		{"10.0.0.0/8", []textPrefix{{text: "10."}}, true},
		{"10.96.5.7/32", []textPrefix{{text: "10.96.5.7", exact: true}}, true},
		{"10.96.5.0/30", []textPrefix{{"10.96.5.0", true}, {"10.96.5.1", true}, {"10.96.5.2", true}, {"10.96.5.3", true}}, true},
		{"10.96.4.0/23", []textPrefix{{text: "10.96.4."}, {text: "10.96.5."}}, true},
		{"10.96.5.9/24", []textPrefix{{text: "10.96.5."}}, true}, // not masked
		{"8.0.0.0/7", nil, false},
		{"0.0.0.0/0", nil, false},
		{"::ffff:0:0/96", nil, false},
		{"::ffff:10.0.0.0/120", nil, false},
		{"fd00::/63", nil, false},
	}
	for _, tc := range cases {
		got, ok := textPrefixes(netip.MustParsePrefix(tc.prefix))
		if ok != tc.ok || !cmp.Equal(got, tc.want, cmp.AllowUnexported(textPrefix{})) {
			t.Errorf("textPrefixes(%s) = %v, %v; want %v, %v", tc.prefix, got, ok, tc.want, tc.ok)
		}
	}
	// Every address of 10.96.0.0/20, and its neighbours, against /20's texts.
	p := netip.MustParsePrefix("10.96.0.0/20")
	texts, _ := textPrefixes(p)
	for a := netip.MustParseAddr("10.95.250.0"); a.Compare(netip.MustParseAddr("10.96.20.0")) < 0; a = a.Next() {
		if got := matches(texts, a.String()); got != p.Contains(a) {
			t.Fatalf("%s: matched %v, in %s %v", a, got, p, p.Contains(a))
		}
	}
}

// TestTextPrefixes6: the texts of IPv6 prefixes, and every address of
// some /112s (all 65,536) and wider prefixes (a sample) matching them.
func TestTextPrefixes6(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		want   []textPrefix
	}{
		{"fd00::/112", []textPrefix{{text: "fd00::"}}},
		{"fd00::5:0/112", []textPrefix{{text: "fd00::5:"}}},
		{"fd00:0:0:7::/112", []textPrefix{{text: "fd00:0:0:7::"}}},
		{"2001:db8:1:2:3:4::/112", []textPrefix{{"2001:db8:1:2:3:4:0:", false}, {"2001:db8:1:2:3:4::", true}}},
		{"2001:db8:1:2:3:4:5:0/112", []textPrefix{{text: "2001:db8:1:2:3:4:5:"}}},
		{"2001:db8:1:2:3:4:5:100/120", []textPrefix{{text: "2001:db8:1:2:3:4:5:"}}},
		{"2001:db8::1/128", []textPrefix{{"2001:db8::1", true}}},
		// Both of the last two groups zero: the run of three wins.
		{"2001:db8:0:0:1::/96", []textPrefix{{"2001:db8:0:0:1::", true}, {"2001:db8::1:0:", false}}},
	}
	for _, tc := range cases {
		got, ok := textPrefixes(netip.MustParsePrefix(tc.prefix))
		if !ok || !cmp.Equal(got, tc.want, cmp.AllowUnexported(textPrefix{})) {
			t.Errorf("textPrefixes(%s) = %v, %v; want %v", tc.prefix, got, ok, tc.want)
		}
	}
	for _, text := range []string{"fd00::/112", "fd00::5:0/112", "2001:db8:1:2:3:4::/112", "::/112", "0:0:0:1::/112", "fd00::ff00/120"} {
		p := netip.MustParsePrefix(text)
		texts, _ := textPrefixes(p)
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			if !matches(texts, a.String()) {
				t.Fatalf("%s in %s matches none of %v", a, p, texts)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, text := range []string{"fd00::/64", "2001:db8:0:1::/80", "fd00:0:0:0:1::/96", "0:0:0:1::/64", "1::/100"} {
		p := netip.MustParsePrefix(text)
		texts, _ := textPrefixes(p)
		for range 20000 {
			a := randomIn6(rng.Uint64(), rng.Uint64(), p)
			if !matches(texts, a.String()) {
				t.Fatalf("%s in %s matches none of %v", a, p, texts)
			}
		}
	}
}

// randomIn6 returns the address of p whose free bits are taken from hi, lo,
// made more often zero group by group, where canonical names differ.
func randomIn6(hi, lo uint64, p netip.Prefix) netip.Addr {
	var b [16]byte
	for i := range 8 {
		b[i], b[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
	}
	for g := range 8 {
		if b[2*g]&1 == 1 { // zero about half the groups
			b[2*g], b[2*g+1] = 0, 0
		}
	}
	base := p.Masked().Addr().As16()
	bits := p.Bits()
	for i := range b {
		keep := min(max(bits-8*i, 0), 8) // bits of byte i the prefix fixes
		mask := byte(0xff << (8 - keep))
		b[i] = base[i]&mask | b[i]&^mask
	}
	return netip.AddrFrom16(b)
}

// FuzzTextPrefixes6: the canonical name of every address of an IPv6 prefix
// matches its texts, at most 16.
func FuzzTextPrefixes6(f *testing.F) {
	f.Add(uint64(0xfd00000000000000), uint64(0x50000), 112, uint64(7), uint64(0))
	f.Add(uint64(0x20010db800010002), uint64(0x0003000400000000), 96, uint64(0), uint64(1))
	f.Add(uint64(0), uint64(0), 64, uint64(1), uint64(1<<32))
	f.Fuzz(func(t *testing.T, baseHi, baseLo uint64, bits int, hi, lo uint64) {
		var b [16]byte
		for i := range 8 {
			b[i], b[8+i] = byte(baseHi>>(56-8*i)), byte(baseLo>>(56-8*i))
		}
		p, err := netip.AddrFrom16(b).Prefix(bits)
		if err != nil {
			return
		}
		texts, ok := textPrefixes(p)
		if !ok {
			if p.Bits() >= 64 && !p.Overlaps(v4Mapped) {
				t.Fatalf("textPrefixes(%s) refused an IPv6 prefix of /64 or longer", p)
			}
			return
		}
		if len(texts) > 16 {
			t.Fatalf("textPrefixes(%s): %d texts", p, len(texts))
		}
		a := randomIn6(hi, lo, p)
		if !p.Contains(a) {
			t.Fatalf("randomIn6: %s not in %s", a, p)
		}
		if !matches(texts, a.String()) {
			t.Fatalf("%s in %s matches none of %v", a, p, texts)
		}
	})
}

// FuzzTextPrefixes: a canonical IPv4 name matches the texts of a prefix
// exactly when the prefix contains the address.
func FuzzTextPrefixes(f *testing.F) {
	f.Add(uint32(0x0a600500), 24, uint32(0x0a600507))
	f.Add(uint32(0x0a600000), 20, uint32(0x0a60100f))
	f.Add(uint32(0x64000000), 9, uint32(0x0a000001))
	f.Fuzz(func(t *testing.T, base uint32, bits int, addr uint32) {
		b := netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)})
		p, err := b.Prefix(bits)
		if err != nil {
			return
		}
		texts, ok := textPrefixes(p)
		if !ok {
			if p.Bits() >= 8 {
				t.Fatalf("textPrefixes(%s) refused an IPv4 prefix of /8 or longer", p)
			}
			return
		}
		if len(texts) > 128 {
			t.Fatalf("textPrefixes(%s): %d texts", p, len(texts))
		}
		a := netip.AddrFrom4([4]byte{byte(addr >> 24), byte(addr >> 16), byte(addr >> 8), byte(addr)})
		if got := matches(texts, a.String()); got != p.Contains(a) {
			t.Fatalf("%s against %s: matched %v, contained %v (texts %v)", a, p, got, p.Contains(a), texts)
		}
	})
}

// TestEtcdLiveNames: the ServiceCIDR controller's live read in the server
// finds, in etcd, exactly the IPAddresses under an IPv4 prefix or an IPv6
// one of /64 or longer (one made a moment before included), and the
// family's list for wider prefixes; under kube-apiserver's default etcd prefix and another one
// (--etcd-prefix), where the keys it reads must be the store's.
func TestEtcdLiveNames(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"/registry", "/clusters/a"} {
		t.Run(prefix, func(t *testing.T) { testEtcdLiveNames(t, prefix) })
	}
}

func testEtcdLiveNames(t *testing.T, etcdPrefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd, store := newIPAddressStore(t, etcdPrefix)
	live := etcdLiveNames{etcd: etcd.Client(), layout: etcdlayout.Layout{Prefix: etcdPrefix}, list: servicecidr.ListNames{Lister: store}}
	owner := allocation.Owner{Namespace: "default", Name: "web"}
	var stored []netip.Addr
	create := func(text string) {
		t.Helper()
		ip := netip.MustParseAddr(text)
		if _, err := store.Create(ctx, ipaddress.NewObject(ip, owner), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, ip)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 150 {
		a := netip.AddrFrom4([4]byte{10, byte(96 + rng.IntN(2)), byte(rng.IntN(20)), byte(rng.IntN(256))})
		if !slices.Contains(stored, a) {
			create(a.String())
		}
	}
	for _, text := range []string{"100.96.5.1", "1.96.5.1", "fd00::1", "fd00::1:5"} {
		create(text)
	}
	want := func(p netip.Prefix, family bool) []string {
		var out []string
		for _, a := range stored {
			if (family && a.Is4() == p.Addr().Is4()) || p.Contains(a) {
				out = append(out, a.String())
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		prefix string
		family bool // read by listing the family
	}{
		{"10.96.5.0/24", false}, {"10.96.0.0/20", false}, {"10.96.0.0/15", false}, {"10.96.3.0/27", false},
		{"10.96.3.7/32", false}, {"10.0.0.0/8", false}, {"172.16.0.0/12", false},
		{"8.0.0.0/6", true}, {"fd00::/112", false}, {"fd00::1:0/112", false}, {"fd00::/64", false},
		{"fd00::/48", true}, {"::ffff:0:0/96", true},
	} {
		p := netip.MustParsePrefix(tc.prefix)
		// The family list may wait for the watch cache (429 until loaded).
		var got []string
		var namesErr error
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			got, namesErr = live.Names(ctx, []netip.Prefix{p})
			return namesErr == nil, nil
		})
		if err != nil {
			t.Fatalf("Names(%s): %v (last error %v)", p, err, namesErr)
		}
		slices.Sort(got)
		if diff := cmp.Diff(want(p, tc.family), got); diff != "" {
			t.Errorf("Names(%s) (-want +got):\n%s", p, diff)
		}
	}
	// One made a moment ago is read.
	create("10.96.5.250")
	got, err := live.Names(ctx, []netip.Prefix{netip.MustParsePrefix("10.96.5.248/29")})
	if err != nil || !slices.Contains(got, "10.96.5.250") {
		t.Errorf("Names right after a create: %v, %v", got, err)
	}
}
