package ipaddress_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"

	"github.com/allocator/allocator/internal/allocmetrics"
	"github.com/allocator/allocator/internal/releasetest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

func owner(i int) allocation.Owner {
	return allocation.Owner{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}
}

// drainAndCheck allocates until ErrFull and checks every address is distinct,
// usable, and that the lower band is only used once the upper band is full.
func drainAndCheck(t *testing.T, ctx context.Context, a *ipaddress.Allocator, prefix string) []netip.Addr {
	t.Helper()
	rng := subrange.MustNew(netip.MustParsePrefix(prefix), model.IPAddress)
	seen := map[netip.Addr]bool{}
	var upper uint64
	var out []netip.Addr
	for i := 0; ; i++ {
		ip, err := a.AllocateNext(ctx, owner(i))
		if errors.Is(err, allocation.ErrFull) {
			break
		}
		if err != nil {
			t.Fatalf("AllocateNext #%d: %v", i, err)
		}
		if !rng.Contains(ip) || seen[ip] {
			t.Fatalf("%s: bad address %s (seen %v)", prefix, ip, seen[ip])
		}
		if rng.InStaticBand(ip) {
			if upper != rng.Size()-rng.StaticSize() {
				t.Fatalf("%s: lower-band %s with %d of %d upper-band addresses taken", prefix, ip, upper, rng.Size()-rng.StaticSize())
			}
		} else {
			upper++
		}
		seen[ip] = true
		out = append(out, ip)
	}
	if uint64(len(out)) != rng.Size() {
		t.Fatalf("%s: drained %d addresses, want %d", prefix, len(out), rng.Size())
	}
	u, err := a.Usage(ctx)
	if err != nil || u.Used != rng.Size() || u.Size != rng.Size() || u.StaticUsed != rng.StaticSize() {
		t.Fatalf("%s: usage %+v, %v", prefix, u, err)
	}
	return out
}

func TestDrainIPv4AndIPv6(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/24,fd00::/120")
	ctx := testContext(t)
	client := newClient(t, cfg)
	for _, tc := range []struct {
		prefix string
		ipv6   bool
	}{{"10.0.0.0/24", false}, {"fd00::/120", true}} {
		t.Run(tc.prefix, func(t *testing.T) {
			a := newAllocator(t, cfg, tc.ipv6)
			got := drainAndCheck(t, ctx, a, tc.prefix)

			// The claim is an IPAddress object as kube-apiserver writes it.
			obj, err := client.NetworkingV1().IPAddresses().Get(ctx, got[0].String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			family := "IPv4"
			if tc.ipv6 {
				family = "IPv6"
			}
			wantLabels := map[string]string{ipaddress.LabelIPFamily: family, ipaddress.LabelManagedBy: ipaddress.ManagedBy}
			if diff := cmp.Diff(wantLabels, obj.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			wantRef := &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "svc-0"}
			if diff := cmp.Diff(wantRef, obj.Spec.ParentRef); diff != "" {
				t.Errorf("parentRef (-want +got):\n%s", diff)
			}

			// Dry-run on a full range, static on a taken address.
			if _, err := a.DryRun().AllocateNext(ctx, owner(0)); !errors.Is(err, allocation.ErrFull) || err.Error() != "range is full" ||
				!strings.Contains(allocation.Hint(err), "add a ServiceCIDR for more addresses") {
				t.Errorf("dry-run AllocateNext on a full range: %v (hint %q), want kube-apiserver's text and a hint", err, allocation.Hint(err))
			}
			if err := a.Allocate(ctx, got[5], owner(999)); !errors.Is(err, allocation.ErrAllocated) {
				t.Errorf("static on a taken address: %v", err)
			}

			// Release by another Service is a no-op; by the owner frees it.
			victim := got[7]
			if err := a.Release(ctx, victim, owner(8)); err != nil {
				t.Fatal(err)
			}
			if has, err := a.Has(ctx, victim); err != nil || !has {
				t.Fatalf("released by a non-owner: has=%v err=%v", has, err)
			}
			if err := a.Release(ctx, victim, owner(7)); err != nil {
				t.Fatal(err)
			}
			if has, err := a.Has(ctx, victim); err != nil || has {
				t.Fatalf("not released by its owner: has=%v err=%v", has, err)
			}
			if err := a.Release(ctx, victim, owner(7)); err != nil {
				t.Fatalf("second release is not a no-op: %v", err)
			}
			if ip, err := a.DryRun().AllocateNext(ctx, owner(1000)); err != nil || ip != victim {
				t.Fatalf("dry-run after release = %s, %v; want %s", ip, err, victim)
			}
			if has, _ := a.Has(ctx, victim); has {
				t.Fatal("dry-run created the IPAddress")
			}
			if ip, err := a.AllocateNext(ctx, owner(1000)); err != nil || ip != victim {
				t.Fatalf("re-allocate after release = %s, %v; want %s", ip, err, victim)
			}
		})
	}
}

// TestSlash64 allocates through the server in an IPv6 /64 and takes the last
// address of the prefix statically. (10,000 picks run in the FreeIndex unit
// test; through the server 1,000 keep the suite short.)
// TestSlash64 makes 10,000 dynamic allocations from an IPv6 /64 through the
// server: all inside the prefix and distinct, and the last address of the
// /64 is allocatable statically.
func TestSlash64(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	a := newAllocator(t, cfg, true)
	if _, err := newClient(t, cfg).NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "v6"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"2001:db8:1:2::/64"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the /64 to be served", func() bool { return len(a.Ranges()) == 1 })
	prefix := netip.MustParsePrefix("2001:db8:1:2::/64")
	const total, workers = 10000, 16
	var (
		mu   sync.Mutex
		seen = make(map[netip.Addr]bool, total)
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > total {
					return
				}
				ip, err := a.AllocateNext(ctx, owner(i))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				dup := seen[ip]
				seen[ip] = true
				mu.Unlock()
				if !prefix.Contains(ip) || ip == prefix.Addr() || dup {
					errs <- fmt.Errorf("bad address %s (duplicate %v)", ip, dup)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("%d distinct addresses, want %d", len(seen), total)
	}
	last := netip.MustParseAddr("2001:db8:1:2:ffff:ffff:ffff:ffff")
	if err := a.Allocate(ctx, last, owner(-1)); err != nil {
		t.Fatalf("static last address of the /64: %v", err)
	}
	if err := a.Allocate(ctx, netip.MustParseAddr("2001:db8:1:3::1"), owner(-2)); !errors.Is(err, allocation.ErrMismatchedNetwork) {
		t.Fatalf("static outside every ServiceCIDR: %v", err)
	}
}

// TestShrink deletes the bigger of two overlapping ServiceCIDRs: it stops
// serving at once, its deletion waits while it holds addresses no other
// ServiceCIDR covers, and once they are released it goes and only the small
// one serves.
func TestShrink(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/28")
	ctx := testContext(t)
	client := newClient(t, cfg)
	a := newAllocator(t, cfg, false)
	small := netip.MustParsePrefix("10.0.0.0/28")
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "big"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the /24 to be served", func() bool { return len(a.Ranges()) == 2 })
	var outside []netip.Addr
	for i := 0; len(outside) < 5; i++ {
		if i > 100 {
			t.Fatalf("no addresses outside the /28 after %d allocations", i)
		}
		ip, err := a.AllocateNext(ctx, owner(i))
		if err != nil {
			t.Fatal(err)
		}
		if !small.Contains(ip) {
			outside = append(outside, ip)
		}
	}
	big := netip.MustParsePrefix("10.0.0.0/24")
	first := a.Ranges()[0]
	for _, tc := range []struct {
		ip   netip.Addr
		want netip.Prefix
	}{
		{outside[0], big},                           // only the /24 holds it
		{netip.MustParseAddr("10.0.0.1"), first},    // both do: the first in allocation order
		{netip.MustParseAddr("192.168.0.1"), first}, // none does: the first served
	} {
		if got, ok := a.CIDROf(tc.ip); !ok || got != tc.want {
			t.Errorf("CIDROf(%s) = %s, %v; want %s (ranges %v)", tc.ip, got, ok, tc.want, a.Ranges())
		}
	}
	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the terminating /24 to stop serving", func() bool { return len(a.Ranges()) == 1 })
	if got, ok := a.CIDROf(outside[0]); !ok || got != small {
		t.Errorf("CIDROf(%s) once the /24 stopped serving = %s, %v; want %s", outside[0], got, ok, small)
	}
	for i := range 20 {
		ip, err := a.AllocateNext(ctx, owner(1000+i))
		if errors.Is(err, allocation.ErrFull) {
			break
		}
		if err != nil || !small.Contains(ip) {
			t.Fatalf("allocation while the /24 terminates: %s %v", ip, err)
		}
	}
	// Still there: it holds addresses only it covers.
	time.Sleep(time.Second) // give the ServiceCIDR controller a chance to get it wrong
	if _, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, "big", metav1.GetOptions{}); err != nil {
		t.Fatalf("the /24 went while holding addresses: %v", err)
	}
	for _, ip := range outside {
		if err := a.Release(ctx, ip, findOwner(t, ctx, client, ip)); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, ctx, "the /24 to go once empty", func() bool {
		_, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, "big", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if got := a.Ranges(); len(got) != 1 || got[0] != small {
		t.Fatalf("served ranges after the shrink: %v", got)
	}
}

// findOwner reads the owner of ip from its IPAddress.
func findOwner(t *testing.T, ctx context.Context, client kubernetes.Interface, ip netip.Addr) allocation.Owner {
	t.Helper()
	obj, err := client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return allocation.Owner{Namespace: obj.Spec.ParentRef.Namespace, Name: obj.Spec.ParentRef.Name}
}

func TestMultiCIDR(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/28")
	ctx := testContext(t)
	client := newClient(t, cfg)
	a := newAllocator(t, cfg, false)
	a6 := newAllocator(t, cfg, true)

	first := drainAndCheck(t, ctx, a, "10.0.0.0/28")
	if len(first) != 14 {
		t.Fatalf("a /28 has 14 usable addresses, got %d", len(first))
	}
	create := func(name string, cidrs ...string) {
		t.Helper()
		_, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create ServiceCIDR %s: %v", name, err)
		}
	}
	create("overlap", "10.0.0.0/24")
	poll(t, ctx, "the /24 to be served", func() bool { return len(a.Ranges()) == 2 })
	u, err := a.Usage(ctx)
	if err != nil || u.Size != 254 || u.Used != 14 {
		t.Fatalf("usage after adding the overlapping /24: %+v %v (want size 254, used 14)", u, err)
	}
	got := map[netip.Addr]bool{}
	for _, ip := range first {
		got[ip] = true
	}
	for i := 0; ; i++ {
		ip, err := a.AllocateNext(ctx, owner(100+i))
		if errors.Is(err, allocation.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if got[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		got[ip] = true
	}
	if len(got) != 254 {
		t.Fatalf("overlap: %d addresses in total, want 254", len(got))
	}

	// A disjoint dual-stack ServiceCIDR: each family takes only its half.
	create("dual", "10.1.0.0/28", "fd00:1::/124")
	poll(t, ctx, "the dual-stack ServiceCIDR", func() bool { return len(a.Ranges()) == 3 && len(a6.Ranges()) == 1 })
	for i := range 14 {
		ip, err := a.AllocateNext(ctx, owner(1000+i))
		if err != nil || !netip.MustParsePrefix("10.1.0.0/28").Contains(ip) {
			t.Fatalf("IPv4 from the disjoint CIDR: %s %v", ip, err)
		}
	}
	if _, err := a.AllocateNext(ctx, owner(2000)); !errors.Is(err, allocation.ErrFull) {
		t.Fatalf("both full: %v", err)
	}
	drainAndCheck(t, ctx, a6, "fd00:1::/124")

	// A ServiceCIDR that is not ready is skipped: one being deleted while it
	// still holds an address (the ServiceCIDR controller keeps it, Ready
	// False, reason Terminating).
	create("notready", "10.2.0.0/28")
	poll(t, ctx, "the new ServiceCIDR", func() bool { return len(a.Ranges()) == 4 })
	if err := a.Allocate(ctx, netip.MustParseAddr("10.2.0.4"), owner(2999)); err != nil {
		t.Fatal(err)
	}
	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "notready", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the terminating ServiceCIDR to be dropped", func() bool { return len(a.Ranges()) == 3 })
	sc, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, "notready", metav1.GetOptions{})
	if err != nil || ipaddress.IsReady(sc) {
		t.Fatalf("the ServiceCIDR holding 10.2.0.4 should still exist, not ready: %v %+v", err, sc)
	}
	if _, err := a.AllocateNext(ctx, owner(3000)); !errors.Is(err, allocation.ErrFull) {
		t.Fatalf("a not-ready ServiceCIDR served an address: %v", err)
	}
	if err := a.Allocate(ctx, netip.MustParseAddr("10.2.0.5"), owner(3001)); !errors.Is(err, allocation.ErrMismatchedNetwork) {
		t.Fatalf("static in a not-ready ServiceCIDR: %v", err)
	}
}

// TestRaces drains a /22 with 3 allocators (own clients and informers) × 16
// goroutines: every address is handed out exactly once.
func TestRaces(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/22")
	ctx := testContext(t)
	var allocators []*ipaddress.Allocator
	for range 3 {
		allocators = append(allocators, newAllocator(t, cfg, false))
	}
	var (
		mu       sync.Mutex
		got      = map[netip.Addr]int{}
		wg       sync.WaitGroup
		failures atomic.Int64
		next     atomic.Int64
	)
	for _, a := range allocators {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ip, err := a.AllocateNext(ctx, owner(int(next.Add(1))))
					switch {
					case errors.Is(err, allocation.ErrFull):
						return
					case errors.Is(err, ipaddress.ErrTooManyCollisions):
						continue
					case err != nil:
						failures.Add(1)
						t.Errorf("AllocateNext: %v", err)
						return
					}
					mu.Lock()
					got[ip]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	rng := subrange.MustNew(netip.MustParsePrefix("10.0.0.0/22"), model.IPAddress)
	for ip, n := range got {
		if n != 1 || !rng.Contains(ip) {
			t.Errorf("%s handed out %d times", ip, n)
		}
	}
	if uint64(len(got)) != rng.Size() {
		t.Errorf("%d addresses handed out, want %d", len(got), rng.Size())
	}
	list, err := newClient(t, cfg).NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil || uint64(len(list.Items)) != rng.Size() {
		t.Errorf("%d IPAddress objects (err %v), want %d", len(list.Items), err, rng.Size())
	}
	// Collisions are counted, and exported as a metric (one registry per
	// instance: each would be its own server).
	var collisions uint64
	var exported float64
	for _, a := range allocators {
		collisions += a.Collisions()
		registry := metrics.NewKubeRegistry()
		m := allocmetrics.New()
		m.Register(registry)
		m.Wrap(a)
		families, err := registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "allocator_clusterip_allocation_collisions_total" {
				for _, metric := range f.GetMetric() {
					exported += metric.GetCounter().GetValue()
				}
			}
		}
	}
	t.Logf("drained %d addresses with 3×16 workers, %d collisions", len(got), collisions)
	if collisions == 0 || exported != float64(collisions) {
		t.Errorf("collisions: %d counted, %v exported as a metric; want the same, above 0 (3 instances raced for a /22)", collisions, exported)
	}
}

// TestFaults: a server error aborts AllocateNext after one create; before the
// informers sync the allocator answers ErrNotReady.
func TestFaults(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/24")
	ctx := testContext(t)

	t.Run("server error", func(t *testing.T) {
		var creates atomic.Int64
		broken := rest.CopyConfig(cfg)
		broken.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/ipaddresses") {
					creates.Add(1)
					body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"boom","reason":"InternalError","code":500}`
					return &http.Response{
						StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
						Body: io.NopCloser(bytes.NewBufferString(body)), Request: r,
					}, nil
				}
				return rt.RoundTrip(r)
			})
		})
		broken.QPS, broken.Burst = 1000, 1000
		a := newAllocator(t, broken, false)
		_, err := a.AllocateNext(ctx, owner(1))
		if err == nil || errors.Is(err, allocation.ErrFull) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("AllocateNext with a failing server: %v", err)
		}
		// client-go retries some 5xx on its own; count requests that reached
		// the transport, which must be exactly one create.
		if n := creates.Load(); n != 1 {
			t.Fatalf("%d create attempts, want 1", n)
		}
		if u, _ := a.Usage(ctx); u.Used != 0 {
			t.Fatalf("failed claim left the address marked: %+v", u)
		}
	})

	t.Run("not ready before sync", func(t *testing.T) {
		release := make(chan struct{})
		blocked := rest.CopyConfig(cfg)
		blocked.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/servicecidrs") {
					select {
					case <-release:
					case <-r.Context().Done():
						return nil, r.Context().Err()
					}
				}
				return rt.RoundTrip(r)
			})
		})
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		a, err := ipaddress.New(actx, ipaddress.Config{Client: newClient(t, blocked)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.AllocateNext(ctx, owner(1)); !errors.Is(err, allocation.ErrNotReady) {
			t.Fatalf("AllocateNext before sync: %v", err)
		}
		if err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.9"), owner(1)); !errors.Is(err, allocation.ErrNotReady) {
			t.Fatalf("Allocate before sync: %v", err)
		}
		if _, err := a.Usage(ctx); !errors.Is(err, allocation.ErrNotReady) {
			t.Fatalf("Usage before sync: %v", err)
		}
		close(release)
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AllocateNext(ctx, owner(1)); err != nil {
			t.Fatalf("AllocateNext after sync: %v", err)
		}
	})
}

// TestReleaseStaleCache: Release through client-go deletes the informer's
// copy with its UID and resourceVersion as preconditions; the scenario is
// internal/releasetest's (the server's own storage runs it too, in
// test/integration).
func TestReleaseStaleCache(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/24")
	releasetest.Run(t, testContext(t), newAllocator(t, cfg, false), newClient(t, cfg), netip.MustParseAddr("10.0.0.10"), 21)
}
