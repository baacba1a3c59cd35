package dualwrite_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/dualwrite"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// The tests run the project's API server in-process on a real embedded etcd:
// it serves the IPAddresses and the default ServiceCIDR (its
// --service-cluster-ip-range). The server itself runs the bitmap model on its
// own key, so its kubernetes Service claims no IPAddress; each test's bitmap
// lives at a key of its own, with a window (a /28 or /27) inside the
// ServiceCIDR, so the tests of one server never share an address.

// gate is a transition membership that is always in (dual) or out.
type gate struct{ dual bool }

func (g gate) Begin(context.Context) (bool, func(), error) { return g.dual, func() {}, nil }

// failPOSTs makes the next IPAddress create fail after calling cancel: the
// request's context ends between the bit's claim and the IPAddress's.
type failPOSTs struct {
	armed  atomic.Bool
	cancel atomic.Pointer[context.CancelFunc]
	// doubt makes the next IPAddress create reach the server and then fail
	// as the server's claim does when its outcome cannot be learned: stored,
	// and reported as allocation.ErrOutcomeUnknown.
	doubt atomic.Bool
}

type env struct {
	srv  *testserver.Server
	cfg  *rest.Config
	fail *failPOSTs
	// ip is one IPAddress allocator on a client whose IPAddress creates
	// can be made to fail (fail).
	ip *ipaddress.Allocator
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func startEnv(t *testing.T, serviceRange string) *env {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{ServiceRange: serviceRange, Model: string(model.Bitmap)})
	e := &env{srv: srv, cfg: rest.CopyConfig(srv.RESTConfig), fail: &failPOSTs{}}
	e.cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/ipaddresses") && e.fail.armed.CompareAndSwap(true, false) {
				(*e.fail.cancel.Load())()
				return nil, fmt.Errorf("test: IPAddress create cut off: %w", context.Canceled)
			}
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/ipaddresses") && e.fail.doubt.CompareAndSwap(true, false) {
				resp, err := rt.RoundTrip(r)
				if err == nil {
					resp.Body.Close()
				}
				return nil, fmt.Errorf("test: IPAddress create answer lost (%v): %w", err, allocation.ErrOutcomeUnknown)
			}
			return rt.RoundTrip(r)
		})
	}
	client, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.ip, err = ipaddress.New(ctx, ipaddress.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := e.ip.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	return e
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// bits returns a bitmap of window at a key of the test's own, created.
func (e *env) bits(t *testing.T, window string) *clusterip.EtcdAllocator {
	t.Helper()
	rng, err := subrange.New(netip.MustParsePrefix(window), model.Bitmap)
	if err != nil {
		t.Fatal(err)
	}
	b, err := clusterip.NewEtcdAllocator(e.srv.Etcd.Client(), "/registry/dualwrite-test/"+t.Name(), rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Initialize(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return b
}

// dual returns the dual-writing allocator over e.ip and b.
func (e *env) dual(t *testing.T, b *clusterip.EtcdAllocator, g gate) *dualwrite.Allocator {
	t.Helper()
	a, err := dualwrite.New(e.ip, b, g)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// owner returns the IPAddress's parent, or "" when it does not exist.
func (e *env) owner(t *testing.T, ip netip.Addr) string {
	t.Helper()
	obj, err := e.srv.Client.NetworkingV1().IPAddresses().Get(testContext(t), ip.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj.Spec.ParentRef.Namespace + "/" + obj.Spec.ParentRef.Name
}

// setBits lists the addresses whose bits are set in b's window.
func setBits(t *testing.T, b *clusterip.EtcdAllocator) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	rng := b.Range()
	for ip := rng.First(); rng.Contains(ip); ip = ip.Next() {
		if hasBit(t, b, ip) {
			out = append(out, ip)
		}
	}
	return out
}

func hasBit(t *testing.T, b *clusterip.EtcdAllocator, ip netip.Addr) bool {
	t.Helper()
	has, err := b.Has(testContext(t), ip)
	if err != nil {
		t.Fatal(err)
	}
	return has
}

// fill sets every bit of b's window but keep.
func fill(t *testing.T, b *clusterip.EtcdAllocator, keep ...netip.Addr) {
	t.Helper()
	ctx := testContext(t)
	rng := b.Range()
	for ip := rng.First(); rng.Contains(ip); ip = ip.Next() {
		if ip == keep[0] || (len(keep) > 1 && ip == keep[1]) {
			continue
		}
		if err := b.Allocate(ctx, ip, allocation.Owner{}); err != nil {
			t.Fatalf("fill %s: %v", ip, err)
		}
	}
}

func svc(name string) allocation.Owner { return allocation.Owner{Namespace: "default", Name: name} }

var (
	bitmapOnly = svc("bitmap-replica") // allocated by a bitmap-model replica: a bit, no IPAddress
	other      = svc("other")
)

func TestDualWrite(t *testing.T) {
	t.Parallel()
	e := startEnv(t, "10.0.0.0/24")
	etcd := e.srv.Etcd.Client()

	// The bit is claimed before the IPAddress: its write has the lower etcd
	// revision, and an address whose bit is taken gets no IPAddress.
	t.Run("BitBeforeIPAddress", func(t *testing.T) {
		ctx := testContext(t)
		b := e.bits(t, "10.0.0.16/28")
		a := e.dual(t, b, gate{dual: true})
		static := netip.MustParseAddr("10.0.0.17")
		if err := a.Allocate(ctx, static, svc("static")); err != nil {
			t.Fatal(err)
		}
		dynamic, err := a.AllocateNext(ctx, svc("dynamic"))
		if err != nil {
			t.Fatal(err)
		}
		if !b.Range().Contains(dynamic) {
			t.Fatalf("AllocateNext gave %s, outside the window with room in it", dynamic)
		}
		for _, ip := range []netip.Addr{static, dynamic} {
			bitRev, ipRev := bitRevision(t, etcd, b, ip), createRevision(t, etcd, ip)
			if bitRev == 0 || ipRev == 0 || bitRev >= ipRev {
				t.Errorf("%s: bit set at revision %d, IPAddress created at %d; want the bit first", ip, bitRev, ipRev)
			}
		}

		// An address neither call above took (AllocateNext picks at random).
		taken := netip.MustParseAddr("10.0.0.20")
		if taken == dynamic {
			taken = taken.Next()
		}
		if err := b.Allocate(ctx, taken, bitmapOnly); err != nil {
			t.Fatal(err)
		}
		if err := a.Allocate(ctx, taken, svc("late")); !errors.Is(err, allocation.ErrAllocated) {
			t.Errorf("allocate an address whose bit is taken: %v, want ErrAllocated", err)
		}
		if got := e.owner(t, taken); got != "" {
			t.Errorf("an IPAddress for %s owned by %q was created although its bit was taken", taken, got)
		}
	})

	// An IPAddress without its bit (a writer that does not dual-write) is a
	// collision: its bit is set, because the address is in use, and the next
	// candidate is tried.
	t.Run("IPAddressWithoutBitIsACollision", func(t *testing.T) {
		ctx := testContext(t)
		b := e.bits(t, "10.0.0.32/28")
		a := e.dual(t, b, gate{dual: true})
		held, free := netip.MustParseAddr("10.0.0.33"), netip.MustParseAddr("10.0.0.34")
		fill(t, b, held, free)
		if err := e.ip.Allocate(ctx, held, other); err != nil { // the IPAddress only
			t.Fatal(err)
		}
		got, err := a.AllocateNext(ctx, svc("next"))
		if err != nil {
			t.Fatal(err)
		}
		if got != free {
			t.Errorf("AllocateNext = %s, want %s (the only candidate without an IPAddress)", got, free)
		}
		if owner := e.owner(t, held); owner != other.String() {
			t.Errorf("IPAddress %s owned by %q, want %s's kept", held, owner, other)
		}

		// Only the held candidate is left: it is tried, its bit stays set,
		// and with the window now full the next address comes from outside.
		b2 := e.bits(t, "10.0.0.48/28")
		a2 := e.dual(t, b2, gate{dual: true})
		held2 := netip.MustParseAddr("10.0.0.49")
		fill(t, b2, held2)
		if err := e.ip.Allocate(ctx, held2, other); err != nil {
			t.Fatal(err)
		}
		got, err = a2.AllocateNext(ctx, svc("next-2"))
		if err != nil {
			t.Fatal(err)
		}
		if b2.Range().Contains(got) {
			t.Errorf("AllocateNext = %s, inside the full window", got)
		}
		if !hasBit(t, b2, held2) {
			t.Errorf("the bit of %s, whose IPAddress another Service holds, is not set", held2)
		}
		if err := a2.Release(ctx, got, svc("next-2")); err != nil {
			t.Fatal(err)
		}
	})

	// Collisions are bounded: when every candidate holds an IPAddress, at
	// most DefaultMaxCollisions+1 are tried.
	t.Run("CollisionsBounded", func(t *testing.T) {
		ctx := testContext(t)
		b := e.bits(t, "10.0.0.128/27")
		a := e.dual(t, b, gate{dual: true})
		rng := b.Range()
		for ip := rng.First(); rng.Contains(ip); ip = ip.Next() {
			if err := e.ip.Allocate(ctx, ip, other); err != nil {
				t.Fatal(err)
			}
		}
		_, err := a.AllocateNext(ctx, svc("unlucky"))
		if !errors.Is(err, ipaddress.ErrTooManyCollisions) {
			t.Fatalf("AllocateNext with every candidate held: %v, want ErrTooManyCollisions", err)
		}
		set := 0
		for ip := rng.First(); rng.Contains(ip); ip = ip.Next() {
			if hasBit(t, b, ip) {
				set++
			}
		}
		if set != ipaddress.DefaultMaxCollisions+1 {
			t.Errorf("%d candidates tried (bits set), want %d", set, ipaddress.DefaultMaxCollisions+1)
		}
	})

	// A claim whose IPAddress create fails frees the bit it took, on a
	// context detached from the request: here the request's context ends
	// between the two.
	t.Run("FailedClaimFreesBitOnDetachedContext", func(t *testing.T) {
		b := e.bits(t, "10.0.0.64/28")
		a := e.dual(t, b, gate{dual: true})
		ip := netip.MustParseAddr("10.0.0.70")
		for _, call := range []struct {
			name  string
			claim func(ctx context.Context) error
		}{
			{"Allocate", func(ctx context.Context) error { return a.Allocate(ctx, ip, svc("cut-off")) }},
			{"AllocateNext", func(ctx context.Context) error { _, err := a.AllocateNext(ctx, svc("cut-off")); return err }},
		} {
			ctx, cancel := context.WithCancel(testContext(t))
			e.fail.cancel.Store(&cancel)
			e.fail.armed.Store(true)
			err := call.claim(ctx)
			cancel()
			if err == nil || e.fail.armed.Load() {
				t.Fatalf("%s: %v (create cut off: %v), want the create to fail", call.name, err, !e.fail.armed.Load())
			}
			if ctx.Err() == nil {
				t.Fatalf("%s: the request's context did not end", call.name)
			}
			if used := usedBits(t, b); used != 0 {
				t.Errorf("%s: %d bits left set after the failed claim, want 0", call.name, used)
			}
		}
		if got := e.owner(t, ip); got != "" {
			t.Errorf("IPAddress of %s owned by %q after the failed claim", ip, got)
		}
	})

	// A claim whose IPAddress create's outcome is unknown keeps its bit: the
	// IPAddress was stored, and a bitmap-model replica beside it, allocating
	// every free address of the window, never hands that address out.
	t.Run("ClaimInDoubtKeepsBit", func(t *testing.T) {
		ctx := testContext(t)
		b := e.bits(t, "10.0.0.96/28")
		a := e.dual(t, b, gate{dual: true})
		for _, call := range []struct {
			name  string
			ip    netip.Addr
			claim func(ctx context.Context, ip netip.Addr) (netip.Addr, error)
		}{
			{"Allocate", netip.MustParseAddr("10.0.0.100"), func(ctx context.Context, ip netip.Addr) (netip.Addr, error) {
				return ip, a.Allocate(ctx, ip, svc("in-doubt"))
			}},
			{"AllocateNext", netip.Addr{}, func(ctx context.Context, _ netip.Addr) (netip.Addr, error) {
				before := setBits(t, b)
				_, err := a.AllocateNext(ctx, svc("in-doubt-next"))
				for _, ip := range setBits(t, b) {
					if !slices.Contains(before, ip) {
						return ip, err
					}
				}
				return netip.Addr{}, err
			}},
		} {
			e.fail.doubt.Store(true)
			ip, err := call.claim(ctx, call.ip)
			if !errors.Is(err, allocation.ErrOutcomeUnknown) || e.fail.doubt.Load() {
				t.Fatalf("%s: %v, want the create's outcome unknown", call.name, err)
			}
			if !ip.IsValid() || !hasBit(t, b, ip) {
				t.Fatalf("%s: the bit of the claim in doubt (%v) was freed", call.name, ip)
			}
			if got := e.owner(t, ip); !strings.HasPrefix(got, "default/in-doubt") {
				t.Fatalf("%s: IPAddress %s owned by %q, want the claim in doubt's", call.name, ip, got)
			}
			t.Logf("%s: claim of %s in doubt, its IPAddress stored, its bit kept", call.name, ip)
		}
		// A bitmap-model replica takes every address left: none of the two.
		replica := e.bits(t, "10.0.0.96/28")
		taken := map[netip.Addr]bool{}
		for {
			ip, err := replica.AllocateNext(ctx, bitmapOnly)
			if errors.Is(err, allocation.ErrFull) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if owner := e.owner(t, ip); owner != "" {
				t.Errorf("the bitmap replica handed out %s, which IPAddress of %s holds", ip, owner)
			}
			taken[ip] = true
		}
		if len(taken) == 0 {
			t.Errorf("the bitmap replica found no free address: the test proves nothing")
		}
	})

	// Release frees the bit unless the IPAddress belongs to another Service
	// that holds the address: the owner's IPAddress, none, or one naming a
	// Service that does not hold the address (gone) frees it.
	t.Run("ReleaseFreesBitUnlessAnotherServiceHoldsIt", func(t *testing.T) {
		ctx := testContext(t)
		b := e.bits(t, "10.0.0.80/28")
		a := e.dual(t, b, gate{dual: true})
		owned, absent := netip.MustParseAddr("10.0.0.81"), netip.MustParseAddr("10.0.0.82")
		others, stale := netip.MustParseAddr("10.0.0.83"), netip.MustParseAddr("10.0.0.84")
		mine, holder, gone := svc("mine"), svc("holder"), svc("gone")
		if err := a.Allocate(ctx, owned, mine); err != nil {
			t.Fatal(err)
		}
		if err := b.Allocate(ctx, absent, bitmapOnly); err != nil {
			t.Fatal(err)
		}
		if err := a.Allocate(ctx, others, holder); err != nil {
			t.Fatal(err)
		}
		if err := a.Allocate(ctx, stale, gone); err != nil {
			t.Fatal(err)
		}
		// holder is a stored Service holding its address; gone is none.
		holding := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: holder.Namespace, Name: holder.Name},
			Spec:       corev1.ServiceSpec{ClusterIP: others.String(), Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := e.srv.Client.CoreV1().Services(holder.Namespace).Create(ctx, holding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []netip.Addr{owned, absent, others, stale} {
			if err := a.Release(ctx, ip, mine); err != nil {
				t.Fatalf("release %s: %v", ip, err)
			}
		}
		for _, want := range []struct {
			ip    netip.Addr
			bit   bool
			owner string
		}{
			{owned, false, ""},
			{absent, false, ""},
			{others, true, holder.String()},
			{stale, false, gone.String()}, // kept for the repair, which removes it after its grace
		} {
			if bit, owner := hasBit(t, b, want.ip), e.owner(t, want.ip); bit != want.bit || owner != want.owner {
				t.Errorf("%s after release: bit %v, IPAddress of %q; want bit %v, IPAddress of %q", want.ip, bit, owner, want.bit, want.owner)
			}
		}

		// Outside a transition (dual off) the bitmap is not written at all.
		single := e.dual(t, b, gate{dual: false})
		if err := b.Allocate(ctx, owned, bitmapOnly); err != nil {
			t.Fatal(err)
		}
		if err := single.Release(ctx, owned, mine); err != nil {
			t.Fatal(err)
		}
		if !hasBit(t, b, owned) {
			t.Error("a release with dual write off freed a bit")
		}
	})
}

// TestDualWriteOutsideWindowOnlyWhenFull: addresses of the ServiceCIDR
// outside the bitmap's window are handed out, as IPAddresses only, only once
// the window is full.
func TestDualWriteOutsideWindowOnlyWhenFull(t *testing.T) {
	t.Parallel()
	e := startEnv(t, "10.0.0.0/27")
	ctx := testContext(t)
	b := e.bits(t, "10.0.0.0/28") // .1–.14; the ServiceCIDR has .15–.30 besides
	a := e.dual(t, b, gate{dual: true})
	window := b.Range()
	for i := range int(window.Size()) {
		ip, err := a.AllocateNext(ctx, svc(fmt.Sprintf("in-%d", i)))
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if !window.Contains(ip) {
			t.Fatalf("allocation %d: %s, outside the window while it has room", i, ip)
		}
	}
	before, err := b.ReadStored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	outside, err := a.AllocateNext(ctx, svc("outside"))
	if err != nil {
		t.Fatal(err)
	}
	if window.Contains(outside) || !netip.MustParsePrefix("10.0.0.0/27").Contains(outside) {
		t.Errorf("with the window full: %s, want an address of the ServiceCIDR outside %s", outside, window.Prefix())
	}
	if owner := e.owner(t, outside); owner != svc("outside").String() {
		t.Errorf("IPAddress of %s owned by %q, want default/outside", outside, owner)
	}
	after, err := b.ReadStored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision {
		t.Errorf("an allocation outside the window wrote the bitmap (revision %d → %d)", before.Revision, after.Revision)
	}
}

// bitRevision is the ModRevision of the last write of b's key that set ip's
// bit: the key's history is read back from the first revision.
func bitRevision(t *testing.T, etcd *clientv3.Client, b *clusterip.EtcdAllocator, ip netip.Addr) int64 {
	t.Helper()
	ctx := testContext(t)
	cur, err := etcd.Get(ctx, b.Key())
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("read %s: %v", b.Key(), err)
	}
	// Walk back from the current value to the first revision whose value
	// has the bit: each version's value is read at its own revision.
	var first int64
	for rev := cur.Kvs[0].ModRevision; rev > 0; {
		resp, err := etcd.Get(ctx, b.Key(), clientv3.WithRev(rev))
		if err != nil || len(resp.Kvs) != 1 {
			break
		}
		kv := resp.Kvs[0]
		ra, err := etcdlayout.DecodeRangeAllocation(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		m, err := clusterip.NewAllocator(b.Range())
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Restore(ra.Range, ra.Data); err != nil {
			t.Fatal(err)
		}
		if has, _ := m.Has(ctx, ip); !has {
			break
		}
		first = kv.ModRevision
		rev = kv.ModRevision - 1
	}
	return first
}

// createRevision is the etcd revision at which ip's IPAddress was created.
func createRevision(t *testing.T, etcd *clientv3.Client, ip netip.Addr) int64 {
	t.Helper()
	resp, err := etcd.Get(testContext(t), etcdlayout.Layout{}.IPAddress(ip.String()))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read IPAddress %s: %v", ip, err)
	}
	return resp.Kvs[0].CreateRevision
}

func usedBits(t *testing.T, b *clusterip.EtcdAllocator) int {
	t.Helper()
	stored, err := b.ReadStored(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := clusterip.NewAllocator(b.Range())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(b.Range().Prefix().String(), stored.Data); err != nil {
		t.Fatal(err)
	}
	return m.Used()
}
