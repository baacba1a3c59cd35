package clusterip

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// putService stores a Service holding ips at kube-apiserver's key.
func putService(t *testing.T, etcd *etcdtest.Etcd, name string, ips ...string) {
	t.Helper()
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips},
	}
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(context.Background(), etcdlayout.Layout{}.Service("default", name), string(value)); err != nil {
		t.Fatal(err)
	}
}

// storeMap writes a RangeAllocation for cidr holding ips.
func storeMap(t *testing.T, etcd *etcdtest.Etcd, cidr string, ips []netip.Addr) {
	t.Helper()
	mem, err := NewAllocator(bitmapRange(t, cidr))
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		if err := mem.Allocate(context.Background(), ip, owner); err != nil {
			t.Fatalf("allocate %s in %s: %v", ip, cidr, err)
		}
	}
	_, data := mem.Snapshot()
	value, err := etcdlayout.EncodeRangeAllocation(cidr, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(context.Background(), testKey, string(value)); err != nil {
		t.Fatal(err)
	}
}

// wantValue is the exact value a fresh map of cidr holding ips encodes to.
func wantValue(t *testing.T, cidr string, ips []netip.Addr) []byte {
	t.Helper()
	mem, err := NewAllocator(bitmapRange(t, cidr))
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		if err := mem.Allocate(context.Background(), ip, owner); err != nil {
			t.Fatalf("allocate %s in %s: %v", ip, cidr, err)
		}
	}
	_, data := mem.Snapshot()
	value, err := etcdlayout.EncodeRangeAllocation(cidr, data)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

func TestEtcdRerange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		from, to      string
		stored        []netip.Addr
		services      map[string][]string
		want, dropped []netip.Addr
		added         []netip.Addr
	}{{
		name:   "grow /24 to /23, same network: every bit keeps its index",
		from:   "10.0.0.0/24",
		to:     "10.0.0.0/23",
		stored: addrs("10.0.0.1", "10.0.0.10", "10.0.0.200", "10.0.0.254"),
		want:   addrs("10.0.0.1", "10.0.0.10", "10.0.0.200", "10.0.0.254"),
	}, {
		name: "grow /24 to /23 with a lower network: every index shifts by 256",
		from: "10.0.1.0/24",
		to:   "10.0.0.0/23",
		// 10.0.1.0 and 10.0.1.255 were unusable in the /24; now usable, still free.
		stored: addrs("10.0.1.1", "10.0.1.77", "10.0.1.254"),
		want:   addrs("10.0.1.1", "10.0.1.77", "10.0.1.254"),
	}, {
		name:    "move to a disjoint range drops everything",
		from:    "10.0.0.0/24",
		to:      "10.1.0.0/24",
		stored:  addrs("10.0.0.1", "10.0.0.99"),
		dropped: addrs("10.0.0.1", "10.0.0.99"),
	}, {
		name: "shrink /23 to /24 drops the upper half and the new broadcast",
		from: "10.0.0.0/23",
		to:   "10.0.0.0/24",
		stored: addrs("10.0.0.1", "10.0.0.254", "10.0.0.255", "10.0.1.0", "10.0.1.200",
			"10.0.1.254"),
		want:    addrs("10.0.0.1", "10.0.0.254"),
		dropped: addrs("10.0.0.255", "10.0.1.0", "10.0.1.200", "10.0.1.254"),
	}, {
		name:     "Service IPs the new range contains are set even without a bit",
		from:     "10.0.0.0/24",
		to:       "10.0.0.0/23",
		stored:   addrs("10.0.0.5"),
		services: map[string][]string{"a": {"10.0.0.5"}, "b": {"10.0.1.7"}, "outside": {"10.9.9.9"}, "dual": {"fd00::5", "10.0.1.8"}},
		want:     addrs("10.0.0.5", "10.0.1.7", "10.0.1.8"),
		added:    addrs("10.0.1.7", "10.0.1.8"),
	}, {
		name:   "IPv6 /112 grown to /111 keeps the whole old window",
		from:   "fd00::/112",
		to:     "fd00::/111",
		stored: addrs("fd00::1", "fd00::8000", "fd00::ffff"),
		want:   addrs("fd00::1", "fd00::8000", "fd00::ffff"),
	}, {
		name: "IPv6 window stays capped at 65,535: a grown prefix's upper half is outside it",
		from: "fd00::1:0/112",
		to:   "fd00::/111",
		// fd00::1:5 is index 65540 of fd00::/111, beyond the bitmap's window.
		stored:  addrs("fd00::1:5"),
		dropped: addrs("fd00::1:5"),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			etcd := etcdtest.New(t)
			storeMap(t, etcd, tc.from, tc.stored)
			for name, ips := range tc.services {
				putService(t, etcd, name, ips...)
			}
			a := newEtcdAllocator(t, etcd.Client(), tc.to, bitmap.EtcdOptions{})
			res, err := a.Open(ctx)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if res.Created || res.Rerange == nil {
				t.Fatalf("Open = %+v, want a re-range", res)
			}
			rr := res.Rerange
			if rr.From != netip.MustParsePrefix(tc.from) || rr.To != netip.MustParsePrefix(tc.to) {
				t.Errorf("re-range %s → %s, want %s → %s", rr.From, rr.To, tc.from, tc.to)
			}
			if diff := cmp.Diff(tc.dropped, rr.Dropped, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			slices.SortFunc(rr.Added, netip.Addr.Compare)
			if diff := cmp.Diff(tc.added, rr.Added, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("added (-want +got):\n%s", diff)
			}
			if rr.Kept != len(tc.want)-len(tc.added) {
				t.Errorf("kept %d, want %d", rr.Kept, len(tc.want)-len(tc.added))
			}
			got, _ := storedIPs(t, etcd.Client(), a.Range())
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("stored IPs (-want +got):\n%s", diff)
			}
			// Byte-compatible: exactly what a fresh map of the new range holding
			// the same IPs encodes to (minimal big-endian data, same envelope).
			resp, err := etcd.Client().Get(ctx, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if want := wantValue(t, tc.to, tc.want); string(resp.Kvs[0].Value) != string(want) {
				t.Errorf("stored value\n%x\nwant\n%x", resp.Kvs[0].Value, want)
			}
			// The allocator serves the new range at once and never hands out a kept address.
			for range 20 {
				ip, err := a.AllocateNext(ctx, owner)
				if err != nil {
					t.Fatalf("AllocateNext after re-range: %v", err)
				}
				if slices.Contains(tc.want, ip) {
					t.Fatalf("AllocateNext handed out %s, which the re-ranged map keeps", ip)
				}
			}
			// A second open is a no-op.
			if res, err := a.Open(ctx); err != nil || res.Created || res.Rerange != nil {
				t.Fatalf("second Open = %+v, %v; want nothing to do", res, err)
			}
		})
	}
}

// TestEtcdRerangeOtherFamilyRefused: a stored map of the other family is a
// changed family order, which would drop every allocation: refused, untouched.
func TestEtcdRerangeOtherFamilyRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	storeMap(t, etcd, "fd00::/112", addrs("fd00::1"))
	before, err := etcd.Client().Get(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	a := newEtcdAllocator(t, etcd.Client(), "10.0.0.0/24", bitmap.EtcdOptions{})
	if _, err := a.Initialize(ctx); !errors.Is(err, bitmap.ErrStoredRangeMismatch) {
		t.Fatalf("Initialize over another family = %v, want bitmap.ErrStoredRangeMismatch", err)
	}
	after, err := etcd.Client().Get(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Fatal("the other family's map was rewritten")
	}
}

// TestEtcdRerangeLosesCompare slips an old-range allocation between the
// re-range's read and its write: the CAS must lose, and the retry must keep
// that allocation.
func TestEtcdRerangeLosesCompare(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	old := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/24", bitmap.EtcdOptions{})
	if _, err := old.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Allocate(ctx, netip.MustParseAddr("10.0.0.1"), owner); err != nil {
		t.Fatal(err)
	}
	grown := newEtcdAllocator(t, etcd.Client(), "10.0.0.0/23", bitmap.EtcdOptions{})
	slipped := netip.MustParseAddr("10.0.0.123")
	calls := 0
	grown.rerangeBeforeWrite = func() {
		calls++
		if calls == 1 {
			if err := old.Allocate(ctx, slipped, owner); err != nil {
				t.Errorf("old-range allocate between read and write: %v", err)
			}
		}
	}
	res, err := grown.Open(ctx)
	if err != nil || res.Rerange == nil {
		t.Fatalf("Open = %+v, %v", res, err)
	}
	if calls != 2 || grown.Stats().Conflicts != 1 {
		t.Fatalf("re-range computed %d times with %d conflicts, want 2 and 1", calls, grown.Stats().Conflicts)
	}
	got, _ := storedIPs(t, etcd.Client(), grown.Range())
	if want := addrs("10.0.0.1", "10.0.0.123"); !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	// The old-range replica can no longer write: it fails, never overwrites.
	if _, err := old.AllocateNext(ctx, owner); !errors.Is(err, bitmap.ErrStoredRangeMismatch) {
		t.Fatalf("old-range AllocateNext after the re-range = %v, want bitmap.ErrStoredRangeMismatch", err)
	}
}

// TestEtcdRerangeConcurrentWriters re-ranges while old-range replicas
// allocate as fast as they can: every allocation acknowledged to them is in
// the final map, and no address is acknowledged twice.
func TestEtcdRerangeConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	first := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/22", bitmap.EtcdOptions{})
	if _, err := first.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var (
		mu    sync.Mutex
		acked []netip.Addr
		wg    sync.WaitGroup
		stop  atomic.Bool
	)
	started := make(chan struct{}, writers)
	for w := range writers {
		a := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/22", bitmap.EtcdOptions{DisableBatching: w%2 == 0})
		wg.Go(func() {
			for i := 0; i < 400 && !stop.Load(); i++ {
				ip, err := a.AllocateNext(ctx, owner)
				if i == 0 {
					started <- struct{}{}
				}
				if errors.Is(err, bitmap.ErrStoredRangeMismatch) {
					return // the map was re-ranged under us: refused, as it must be
				}
				if err != nil {
					t.Errorf("old-range AllocateNext: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, ip)
				mu.Unlock()
			}
		})
	}
	for range writers {
		<-started
	}
	grown := newEtcdAllocator(t, etcd.Client(), "10.0.0.0/21", bitmap.EtcdOptions{})
	res, err := grown.Open(ctx)
	stop.Store(true)
	wg.Wait()
	if err != nil || res.Rerange == nil {
		t.Fatalf("Open = %+v, %v", res, err)
	}
	if len(res.Rerange.Dropped) != 0 {
		t.Fatalf("growing dropped %v", res.Rerange.Dropped)
	}
	got, _ := storedIPs(t, etcd.Client(), grown.Range())
	held := make(map[netip.Addr]bool, len(got))
	for _, ip := range got {
		held[ip] = true
	}
	seen := make(map[netip.Addr]bool, len(acked))
	for _, ip := range acked {
		if seen[ip] {
			t.Fatalf("%s acknowledged twice", ip)
		}
		seen[ip] = true
		if !held[ip] {
			t.Fatalf("acknowledged %s is missing from the re-ranged map", ip)
		}
	}
	if len(got) != len(acked) {
		t.Fatalf("map holds %d addresses, %d were acknowledged", len(got), len(acked))
	}
	t.Logf("%d allocations acknowledged before the re-range, %d re-range conflicts", len(acked), grown.Stats().Conflicts)
}
