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
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/subrange"
)

// loadResult is what a concurrent load acknowledged.
type loadResult struct {
	mu    sync.Mutex
	acked map[string]string // name -> ClusterIP
	byIP  map[string]string // ClusterIP -> name
	dups  []string
	errs  []error
}

func newLoadResult() *loadResult {
	return &loadResult{acked: map[string]string{}, byIP: map[string]string{}}
}

func (l *loadResult) record(name string, svc *corev1.Service, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("create %s: %w", name, err))
		return
	}
	ip := svc.Spec.ClusterIP
	if other, dup := l.byIP[ip]; dup {
		l.dups = append(l.dups, fmt.Sprintf("%s: %s and %s", ip, other, name))
	}
	l.byIP[ip] = name
	l.acked[name] = ip
}

// runLoad creates n Services through each client at once, workers per
// client; every 10th asks for a static address of the lower band.
func runLoad(ctx context.Context, clients []kubernetes.Interface, n, workers int, static func(i int) string) *loadResult {
	res := newLoadResult()
	var wg sync.WaitGroup
	for c, client := range clients {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					name := fmt.Sprintf("c%d-%04d", c, i)
					var mutate []func(*corev1.Service)
					if ip := static(c*n + i); ip != "" {
						mutate = append(mutate, withIP(ip))
					}
					svc, err := create(ctx, client, newService(name, mutate...))
					if err != nil && isTaken(err) {
						continue // a static address another replica already gave out: the correct refusal
					}
					res.record(name, svc, err)
				}
			}()
		}
	}
	wg.Wait()
	return res
}

func isTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "provided IP is already allocated")
}

// checkConsistent asserts: no duplicate, every acknowledged create stored
// with its address, and (eventually) every Service address held by its own
// IPAddress and, while dual write is on, by its bit.
func checkConsistent(t *testing.T, ctx context.Context, c kubernetes.Interface, etcd *etcdtest.Etcd, cidr string, res *loadResult, wantBits bool) {
	t.Helper()
	for _, d := range res.dups {
		t.Errorf("duplicate ClusterIP: %s", d)
	}
	for _, err := range res.errs {
		t.Errorf("%v", err)
	}
	list, err := c.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	holders := map[string]string{}
	for _, svc := range list.Items {
		stored[svc.Name] = svc.Spec.ClusterIP
		if other, dup := holders[svc.Spec.ClusterIP]; dup {
			t.Errorf("stored Services %s and %s share %s", other, svc.Name, svc.Spec.ClusterIP)
		}
		holders[svc.Spec.ClusterIP] = svc.Name
	}
	for name, ip := range res.acked {
		if stored[name] != ip {
			t.Errorf("acknowledged create %s (%s) stored as %q", name, ip, stored[name])
		}
	}
	store, err := clusterip.NewEtcdAllocator(etcd.Client(), "/registry/ranges/serviceips",
		subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	deadline := time.Now().Add(90 * time.Second)
	for {
		last = ""
		for _, svc := range list.Items {
			ip := svc.Spec.ClusterIP
			obj, err := c.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
			if err != nil || !ipaddress.OwnedBy(obj, allocation.Owner{Namespace: svc.Namespace, Name: svc.Name}) || !ipaddress.IsManaged(obj) {
				last = fmt.Sprintf("IPAddress of %s (%s): err %v, %+v", svc.Name, ip, err, obj)
				break
			}
			if wantBits {
				if has, err := store.Has(ctx, netip.MustParseAddr(ip)); err != nil || !has {
					last = fmt.Sprintf("bit of %s (%s) not set (err %v)", svc.Name, ip, err)
					break
				}
			}
		}
		if last == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if last != "" {
		t.Errorf("not consistent after the repair had 90 s: %s", last)
	}
	ev, err := c.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=ClusterIPNotAllocated"})
	if err == nil {
		for _, e := range ev.Items {
			t.Errorf("false event during the transition: %s %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
		}
	}
}

// TestMixedModels runs a bitmap-model and an IPAddress-model replica on one
// etcd — a control plane half-way through switching models — and creates
// Services through both at once. Without dual write this gave 159 pairs of
// Services one address in 700 creates.
func TestMixedModels(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const cidr = "10.0.0.0/23" // 510 usable, 32 in the static band
	bm := startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: cidr})
	ipr := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: cidr, etcd: bm.etcd})
	st, ok, err := transition.ReadState(ctx, bm.etcd.Client(), "/registry")
	if err != nil || !ok || !st.DualWrite {
		t.Fatalf("transition state = %+v, %v, %v; want dual write on", st, ok, err)
	}
	// 2 × 180 creates in 510 addresses: the bitmap's random scan and the
	// IPAddress replica meet often; every 9th create asks for one of the 31
	// free static addresses, which both replicas then race for.
	static := func(i int) string {
		if i%9 != 0 {
			return ""
		}
		return fmt.Sprintf("10.0.0.%d", 2+(i/9)%30)
	}
	res := runLoad(ctx, []kubernetes.Interface{bm.client, ipr.client}, 180, 6, static)
	if len(res.acked) < 300 {
		t.Fatalf("only %d creates acknowledged (errors: %v)", len(res.acked), res.errs)
	}
	checkConsistent(t, ctx, ipr.client, bm.etcd, cidr, res, true)

	// What `allocator repair` reports: nothing once consistent; a bit set
	// behind everyone's back shows up as a disagreement.
	store, err := clusterip.NewEtcdAllocator(bm.etcd.Client(), "/registry/ranges/serviceips",
		subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := iprepair.CompareModels(ctx, ipr.client, []iprepair.BitmapStore{store}); err != nil || len(problems) != 0 {
		t.Fatalf("CompareModels after the repair = %v, %v; want none", problems, err)
	}
	planted := netip.MustParseAddr("10.0.0.32") // static band, never requested by the load
	if err := store.Allocate(ctx, planted, allocation.Owner{}); err != nil {
		t.Fatalf("plant a bit: %v", err)
	}
	problems, err := iprepair.CompareModels(ctx, ipr.client, []iprepair.BitmapStore{store})
	if err != nil || len(problems) != 1 || problems[0].IP != planted.String() || problems[0].Type != iprepair.TypeDisagreement {
		t.Fatalf("CompareModels with a planted bit = %+v, %v; want one disagreement on %s", problems, err, planted)
	}
}

// TestBitmapModelKeepsIPAddressesTrue: in the bitmap model the IPAddress
// objects (created by the repair, deleted on release) follow the Services,
// so an address re-used by another Service never shows the old one.
func TestBitmapModelKeepsIPAddressesTrue(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServer(t, serverOptions{model: string(model.Bitmap), serviceRange: "10.0.0.0/24"})
	owner := func(ctx context.Context, ip string) (string, error) {
		obj, err := s.client.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return obj.Spec.ParentRef.Namespace + "/" + obj.Spec.ParentRef.Name, nil
	}
	mustCreate(t, ctx, s.client, newService("first", withIP("10.0.0.50")))
	eventually(t, 30*time.Second, "IPAddress 10.0.0.50 of default/first", func(ctx context.Context) (bool, error) {
		o, err := owner(ctx, "10.0.0.50")
		return o == "default/first", err
	})
	mustDelete(t, ctx, s.client, "first")
	mustCreate(t, ctx, s.client, newService("second", withIP("10.0.0.50")))
	eventually(t, 30*time.Second, "IPAddress 10.0.0.50 of default/second", func(ctx context.Context) (bool, error) {
		o, err := owner(ctx, "10.0.0.50")
		if o == "default/first" {
			return false, nil
		}
		return o == "default/second", err
	})
}

// TestDualWriteFullWindowSpills: while dual write is on, the bitmap's window
// is used first; once it is full, dynamic creates get addresses of other
// ServiceCIDRs (IPAddress only, no bit: the map cannot hold them) instead of
// "range is full" (kubernetes#129797), and an address freed in the window
// is used again before the other ServiceCIDRs.
func TestDualWriteFullWindowSpills(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const window = "10.0.0.0/28" // 14 usable; the kubernetes Service holds 10.0.0.1
	etcd := etcdtest.New(t)
	empty, err := etcdlayout.EncodeRangeAllocation(window, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A bitmap exists, so the IPAddress-model server starts dual-writing.
	if _, err := etcd.Client().Put(ctx, "/registry/ranges/serviceips", string(empty)); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: window, etcd: etcd})
	if st, ok, err := transition.ReadState(ctx, etcd.Client(), "/registry"); err != nil || !ok || !st.DualWrite {
		t.Fatalf("transition state = %+v, %v, %v; want dual write on", st, ok, err)
	}
	mustCreateServiceCIDR(t, ctx, s.client, "extra", "10.1.0.0/28")
	waitReadyCIDR(t, s.client, "extra")

	inWindow := netip.MustParsePrefix(window)
	var first []string
	for i := range 13 + 5 {
		svc := mustCreate(t, ctx, s.client, newService(fmt.Sprintf("svc-%02d", i)))
		ip := netip.MustParseAddr(svc.Spec.ClusterIP)
		if i < 13 && !inWindow.Contains(ip) {
			t.Fatalf("create %d got %s outside the bitmap's window while it had room", i, ip)
		}
		if i >= 13 && !netip.MustParsePrefix("10.1.0.0/28").Contains(ip) {
			t.Fatalf("create %d got %s, want an address of ServiceCIDR extra (window full)", i, ip)
		}
		first = append(first, svc.Spec.ClusterIP)
	}
	bits := func() []int {
		resp, err := etcd.Client().Get(ctx, "/registry/ranges/serviceips")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("bitmap: %v", err)
		}
		ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		var set []int
		for i := range 14 {
			if bitSetIndex(ra, i) {
				set = append(set, i)
			}
		}
		return set
	}
	if got := bits(); len(got) != 14 {
		t.Fatalf("bitmap after filling the window has bits %v, want all 14", got)
	}
	// Free one address in the window: the next create takes it back.
	mustDelete(t, ctx, s.client, "svc-03")
	if got := bits(); len(got) != 13 {
		t.Fatalf("bitmap after deleting svc-03 (%s) has %d bits, want 13", first[3], len(got))
	}
	if svc := mustCreate(t, ctx, s.client, newService("again")); svc.Spec.ClusterIP != first[3] {
		t.Fatalf("create after a free in the window got %s, want %s", svc.Spec.ClusterIP, first[3])
	}
}

// bitSetIndex reports whether bit i of ra is set.
func bitSetIndex(ra *corev1.RangeAllocation, i int) bool {
	byteIdx := len(ra.Data) - 1 - i/8
	return byteIdx >= 0 && ra.Data[byteIdx]&(1<<(i%8)) != 0
}
