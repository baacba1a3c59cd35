package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// createMany creates n Services named prefix-i through c from `workers`
// goroutines and returns name → ClusterIP.
func createMany(t *testing.T, ctx context.Context, c kubernetes.Interface, prefix string, n, workers int) map[string]string {
	t.Helper()
	var (
		mu  sync.Mutex
		out = make(map[string]string, n)
		wg  sync.WaitGroup
	)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for i := range next {
				svc, err := create(ctx, c, newService(fmt.Sprintf("%s-%03d", prefix, i)))
				if err != nil {
					t.Errorf("create %s-%03d: %v", prefix, i, err)
					return
				}
				mu.Lock()
				out[svc.Name] = svc.Spec.ClusterIP
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// serviceIPs lists every Service's ClusterIP (name → IP), failing on a
// duplicate.
func serviceIPs(t *testing.T, ctx context.Context, c kubernetes.Interface) map[string]string {
	t.Helper()
	list, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	holder := map[string]string{}
	for _, svc := range list.Items {
		name := svc.Namespace + "/" + svc.Name
		ip := svc.Spec.ClusterIP
		if other, dup := holder[ip]; dup {
			t.Fatalf("ClusterIP %s is held by %s and %s", ip, other, name)
		}
		holder[ip] = name
		out[name] = ip
	}
	return out
}

// storedMap lists the addresses the RangeAllocation at serviceips holds.
func storedMap(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, cidr string) map[netip.Addr]bool {
	t.Helper()
	store, err := clusterip.NewEtcdAllocator(etcd.Client(), "/registry/ranges/serviceips",
		subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.Addr]bool{}
	if err := store.ForEach(ctx, func(ip netip.Addr) { held[ip] = true }); err != nil {
		t.Fatalf("read the stored map: %v", err)
	}
	return held
}

// TestRangeGrowBitmap fills most of a /24 in the bitmap model, restarts the
// server on the same etcd with a /23, and fills the /23: every Service keeps
// its IP, no new create gets an address already held (a bit lost in the
// re-range would show up as a duplicate here, the range being nearly full),
// and the map holds exactly the Service IPs.
func TestRangeGrowBitmap(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	s := startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: "10.0.0.0/24", etcd: etcd})
	mustCreate(t, ctx, s.client, newService("static", withIP("10.0.0.200")))
	createMany(t, ctx, s.client, "before", 200, 8)
	before := serviceIPs(t, ctx, s.client)
	s.stop()

	s = startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: "10.0.0.0/23", etcd: etcd, dataDir: s.dataDir})
	// 510 usable addresses, 202 held: 300 more fit, and every one must be new.
	createMany(t, ctx, s.client, "after", 300, 8)
	after := serviceIPs(t, ctx, s.client) // fails on any duplicate
	for name, ip := range before {
		if after[name] != ip {
			t.Fatalf("%s had %s before the range grew, %q after", name, ip, after[name])
		}
	}
	upper := 0
	held := storedMap(t, ctx, etcd, "10.0.0.0/23")
	for name, ip := range after {
		addr := netip.MustParseAddr(ip)
		if !held[addr] {
			t.Fatalf("%s of %s is not in the re-ranged map", ip, name)
		}
		if netip.MustParsePrefix("10.0.1.0/24").Contains(addr) {
			upper++
		}
	}
	if len(held) != len(after) {
		t.Fatalf("the map holds %d addresses for %d Services", len(held), len(after))
	}
	if upper == 0 {
		t.Fatal("no Service got an address of the grown half")
	}
	t.Logf("%d Services kept their IPs, %d created after the growth (%d in the new half)", len(before), 300, upper)
}

// TestRangeShrinkBitmap shrinks the bitmap model's range under a Service
// whose IP falls outside: the server starts, the Service is still served
// with its IP, repair reports it with ClusterIPOutOfRange, and its address is
// no longer in the map while the in-range ones are.
func TestRangeShrinkBitmap(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	s := startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: "10.0.0.0/23", etcd: etcd})
	mustCreate(t, ctx, s.client, newService("inside", withIP("10.0.0.50")))
	mustCreate(t, ctx, s.client, newService("outside", withIP("10.0.1.50")))
	s.stop()

	s = startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: "10.0.0.0/24", etcd: etcd, dataDir: s.dataDir})
	got, err := s.client.CoreV1().Services("default").Get(ctx, "outside", metav1.GetOptions{})
	if err != nil || got.Spec.ClusterIP != "10.0.1.50" {
		t.Fatalf("the Service outside the new range: %v, %v", got, err)
	}
	eventually(t, 60*time.Second, "ClusterIPOutOfRange for default/outside", func(ctx context.Context) (bool, error) {
		events, err := s.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == "outside" &&
				e.Reason == report.ReasonOutOfRange && strings.Contains(e.Message, "10.0.1.50") && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	held := storedMap(t, ctx, etcd, "10.0.0.0/24")
	if !held[netip.MustParseAddr("10.0.0.50")] || !held[netip.MustParseAddr("10.0.0.1")] {
		t.Fatalf("in-range allocations lost by the shrink: %v", held)
	}
	// The new range serves creates, and the static address inside stays taken.
	if _, err := create(ctx, s.client, newService("again", withIP("10.0.0.50"))); err == nil || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("static create of a kept address = %v, want already allocated", err)
	}
	mustCreate(t, ctx, s.client, newService("new"))
}
