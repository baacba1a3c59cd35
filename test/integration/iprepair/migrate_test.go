package iprepair_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// killAfter returns a client whose requests fail once n IPAddress creates
// (or bitmap-less requests, when n counts all POSTs) went through: a
// migration killed half-way, at a point the test chooses.
func killAfter(t *testing.T, cfg *rest.Config, n int64) (kubernetes.Interface, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var posts atomic.Int64
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPost && posts.Add(1) > n {
				cancel()
			}
			return rt.RoundTrip(req.WithContext(ctx))
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, ctx
}

// fixtureServer puts a capture of upstream's etcd data (internal/fixtures)
// in a fresh etcd and starts our server of model on it, on 10.96.0.0/16.
func fixtureServer(t *testing.T, name, model string) (context.Context, *etcdtest.Etcd, *fixtures.File, *testserver.Server) {
	t.Helper()
	ctx := repairtest.Context(t)
	etcd := etcdtest.New(t)
	fx := fixtures.Load(t, name)
	if _, err := fixtures.Put(ctx, etcd.Client(), fx); err != nil {
		t.Fatal(err)
	}
	return ctx, etcd, fx, testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/16", Model: model, Etcd: etcd})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func familyStores(t *testing.T, etcd *etcdtest.Etcd, cidrs ...string) []iprepair.BitmapStore {
	t.Helper()
	keys := []string{"/registry/ranges/serviceips", "/registry/ranges/secondaryserviceips"}
	var stores []iprepair.BitmapStore
	for i, cidr := range cidrs {
		rng, err := subrange.New(netip.MustParsePrefix(cidr), model.Bitmap)
		if err != nil {
			t.Fatal(err)
		}
		s, err := clusterip.NewEtcdAllocator(etcd.Client(), keys[i], rng, bitmap.EtcdOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	return stores
}

// serviceIPsByName returns every Service's clusterIPs.
func serviceIPsByName(t *testing.T, client kubernetes.Interface) map[string][]string {
	t.Helper()
	services, err := report.ListServices(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range services {
		out[s.Namespace+"/"+s.Name] = s.Spec.ClusterIPs
	}
	return out
}

// checkIPAddressesMatch checks every Service IP has an IPAddress referencing
// that Service, and that no IPAddress is left without one.
func checkIPAddressesMatch(t *testing.T, client kubernetes.Interface, services map[string][]string) {
	t.Helper()
	list, err := client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]networkingv1.IPAddress{}
	for _, o := range list.Items {
		objs[o.Name] = o
	}
	want := 0
	for svc, ips := range services {
		ns, name, _ := strings.Cut(svc, "/")
		for _, ip := range ips {
			if ip == "None" {
				continue
			}
			want++
			obj, ok := objs[ip]
			if !ok || !ipaddress.OwnedBy(&obj, allocation.Owner{Namespace: ns, Name: name}) || !ipaddress.IsManaged(&obj) {
				t.Fatalf("IPAddress %s of %s: %+v (found %v)", ip, svc, obj.Spec.ParentRef, ok)
			}
		}
	}
	if len(objs) != want {
		t.Fatalf("%d IPAddresses for %d Service IPs", len(objs), want)
	}
}

// TestMigrateKubeAPIServer132 migrates what kube-apiserver 1.32 wrote
// (bitmap model, no IPAddresses) to the IPAddress model.
func TestMigrateKubeAPIServer132(t *testing.T) {
	t.Parallel()
	ctx, _, fx, srv := fixtureServer(t, fixtures.Bitmap132, "bitmap")
	rep, err := iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client, DryRun: true})
	if err != nil || rep.Created != 23 || rep.Present != 0 {
		t.Fatalf("dry run: %v %v", err, rep)
	}
	if list, _ := srv.Client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("dry run created %d IPAddresses", len(list.Items))
	}
	rep, err = iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client})
	if err != nil || !rep.Verified || rep.Created != 23 || len(rep.Problems) != 0 {
		t.Fatalf("migrate: %v %v %+v", err, rep, rep)
	}
	want := map[string][]string{}
	for svc, ips := range fx.Expect.Services {
		want[svc] = ips
	}
	checkIPAddressesMatch(t, srv.Client, want)
	rep, err = iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client})
	if err != nil || rep.Created != 0 || rep.Present != 23 || !rep.Verified {
		t.Fatalf("rerun: %v %v", err, rep)
	}
}

// TestMigrateFromInformerSnapshot migrates the same data reading Services
// and IPAddresses from informer caches (a server's start-up carry-over):
// the same counts as from lists; a rerun right after, whose cache may not
// hold every IPAddress just created yet, still creates nothing twice.
func TestMigrateFromInformerSnapshot(t *testing.T) {
	t.Parallel()
	ctx, _, fx, srv := fixtureServer(t, fixtures.Bitmap132, "bitmap")
	factory := informers.NewSharedInformerFactory(srv.Client, 0)
	cfg := iprepair.MigrateConfig{Client: srv.Client, Snapshot: iprepair.InformerSnapshot(factory), DryRun: true}
	factory.Start(ctx.Done())
	rep, err := iprepair.MigrateToIPAddress(ctx, cfg)
	if err != nil || rep.Created != 23 || rep.Present != 0 || rep.Services != len(serviceIPsByName(t, srv.Client)) {
		t.Fatalf("dry run: %v %v", err, rep)
	}
	cfg.DryRun = false
	rep, err = iprepair.MigrateToIPAddress(ctx, cfg)
	if err != nil || !rep.Verified || rep.Created != 23 || len(rep.Problems) != 0 {
		t.Fatalf("migrate: %v %+v", err, rep)
	}
	want := map[string][]string{}
	for svc, ips := range fx.Expect.Services {
		want[svc] = ips
	}
	checkIPAddressesMatch(t, srv.Client, want)
	rep, err = iprepair.MigrateToIPAddress(ctx, cfg)
	if err != nil || rep.Created != 0 || rep.Present != 23 || !rep.Verified {
		t.Fatalf("rerun: %v %v", err, rep)
	}
	checkIPAddressesMatch(t, srv.Client, want)
}

// TestMigrateBothWaysWithKill migrates a dual-stack cluster of many Services
// to the IPAddress model and back, each time killed half-way and rerun.
func TestMigrateBothWaysWithKill(t *testing.T) {
	t.Parallel()
	count := 5000
	if testing.Short() {
		count = 500
	}
	if n, err := strconv.Atoi(os.Getenv("ALLOCATOR_MIGRATE_SERVICES")); err == nil && n > 0 {
		count = n
	}
	// A budget of its own, beyond repairtest.Context's: 5,000 Services carried
	// over both ways, each way twice, take minutes on a machine starved of
	// CPU. It only ends a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/16,fd00::/112", Model: "bitmap", Etcd: etcd})
	createMany(t, srv.Client, count)
	before := serviceIPsByName(t, srv.Client)
	stores := familyStores(t, etcd, "10.0.0.0/16", "fd00::/112")

	// bitmap → IPAddress, killed after a third of the creates.
	killed, killCtx := killAfter(t, srv.RESTConfig, int64(count/3))
	if _, err := iprepair.MigrateToIPAddress(killCtx, iprepair.MigrateConfig{Client: killed}); err == nil {
		t.Fatalf("the killed migration reported success")
	}
	partial, _ := srv.Client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if n := len(partial.Items); n == 0 || n >= count {
		t.Fatalf("kill did not stop the migration half-way: %d IPAddresses", n)
	}
	start := time.Now()
	rep, err := iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client})
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if !rep.Verified || len(rep.Problems) != 0 || rep.Present == 0 {
		t.Fatalf("rerun: %v %+v", rep, rep.Problems)
	}
	t.Logf("bitmap → IPAddress rerun: %s (%v)", rep, time.Since(start))
	checkIPAddressesMatch(t, srv.Client, before)

	// IPAddress → bitmap, from empty maps (as on an IPAddress-only cluster).
	for _, key := range []string{"/registry/ranges/serviceips", "/registry/ranges/secondaryserviceips"} {
		if _, err := etcd.Client().Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	// Killed after the first family's write: the second family is missing.
	if _, err := iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: srv.Client, Stores: stores[:1]}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rep, err = iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: srv.Client, Stores: stores})
	if err != nil || !rep.Verified || len(rep.Problems) != 0 {
		t.Fatalf("to bitmap: %v %v %+v", err, rep, rep.Problems)
	}
	t.Logf("IPAddress → bitmap: %s (%v)", rep, time.Since(start))
	total := 0
	for _, ips := range before {
		for _, ip := range ips {
			if ip == corev1.ClusterIPNone {
				continue
			}
			addr := netip.MustParseAddr(ip)
			s := stores[0]
			if addr.Is6() {
				s = stores[1]
			}
			if has, err := s.(*clusterip.EtcdAllocator).Has(ctx, addr); err != nil || !has {
				t.Fatalf("%s not in the bitmap after migration (%v)", ip, err)
			}
			total++
		}
	}
	u0, _ := stores[0].(*clusterip.EtcdAllocator).Usage(ctx)
	u1, _ := stores[1].(*clusterip.EtcdAllocator).Usage(ctx)
	if int(u0.Used+u1.Used) != total {
		t.Fatalf("bitmaps hold %d addresses, Services %d", u0.Used+u1.Used, total)
	}
	// No Service changed, nothing was re-assigned.
	after := serviceIPsByName(t, srv.Client)
	for svc, ips := range before {
		if fmt.Sprint(after[svc]) != fmt.Sprint(ips) {
			t.Fatalf("%s changed from %v to %v", svc, ips, after[svc])
		}
	}
	// And the bitmap repair agrees.
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: stores})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ctrl.RunOnce(ctx); err != nil || !r.Consistent() {
		t.Fatalf("repair after migration: %v %v %+v", err, r, r.Problems)
	}
}

// TestMigrateToBitmapRefusesUnrepresentable: an IPAddress in an extra
// ServiceCIDR cannot go into the bitmap; nothing is written.
func TestMigrateToBitmapRefusesUnrepresentable(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	stores := familyStores(t, srv.Etcd, "10.0.0.0/24")
	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}}}
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.NetworkingV1().IPAddresses().Create(ctx,
		ipaddress.NewObject(netip.MustParseAddr("10.1.0.5"), allocation.Owner{Namespace: "default", Name: "x"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := stores[0].ReadStored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: srv.Client, Stores: stores})
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].IP != "10.1.0.5" || rep.Verified {
		t.Fatalf("migrate: %v %v %+v", err, rep, rep)
	}
	if !strings.Contains(rep.Problems[0].Message, "cannot be represented in the bitmap model") {
		t.Fatalf("problem message %q", rep.Problems[0].Message)
	}
	if after, _ := stores[0].ReadStored(ctx); after.Revision != before.Revision {
		t.Fatalf("a refused migration wrote the map")
	}
}

// createMany creates n Services with 16 clients at once; every 5th one is
// dual-stack, every 50th headless.
func createMany(t *testing.T, client kubernetes.Interface, n int) {
	t.Helper()
	repairtest.CreateConcurrently(t, client, n, 16, func(i int) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i), Namespace: "default"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		switch {
		case i%50 == 0:
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		case i%5 == 0:
			policy := corev1.IPFamilyPolicyRequireDualStack
			svc.Spec.IPFamilyPolicy = &policy
		}
		return svc
	})
}

// TestMigrationLeavesNodePortMap: migrating between the IP models both ways
// never writes the node-port map (same ModRevision, same ports).
func TestMigrationLeavesNodePortMap(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	for _, name := range []string{"np-1", "np-2"} {
		if _, err := srv.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	key := etcdlayout.Layout{}.ServiceNodePortRange()
	before, err := srv.Etcd.Client().Get(ctx, key)
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("node-port map: %v", err)
	}
	if rep, err := iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client}); err != nil || !rep.Verified {
		t.Fatalf("migrate to ipaddress: %v %v", err, rep)
	}
	stores := familyStores(t, srv.Etcd, "10.0.0.0/24")
	if rep, err := iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: srv.Client, Stores: stores}); err != nil || !rep.Verified {
		t.Fatalf("migrate to bitmap: %v %v", err, rep)
	}
	after, err := srv.Etcd.Client().Get(ctx, key)
	if err != nil || len(after.Kvs) != 1 {
		t.Fatalf("node-port map after: %v", err)
	}
	if after.Kvs[0].ModRevision != before.Kvs[0].ModRevision || string(after.Kvs[0].Value) != string(before.Kvs[0].Value) {
		t.Errorf("migration wrote the node-port map (revision %d → %d)", before.Kvs[0].ModRevision, after.Kvs[0].ModRevision)
	}
}

// newestFirst is a Snapshot of Services given newest first, and of no
// IPAddress but what the API server holds.
type newestFirst struct {
	services []*corev1.Service
	client   kubernetes.Interface
}

func (s newestFirst) Services(context.Context) ([]*corev1.Service, error) { return s.services, nil }

func (s newestFirst) IPAddresses(ctx context.Context) (func(string) *networkingv1.IPAddress, error) {
	return func(name string) *networkingv1.IPAddress {
		ipa, err := s.client.NetworkingV1().IPAddresses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return ipa
	}, nil
}

// TestMigrateOldestFirst: a snapshot may give the Services in any order
// (the informers' caches have none); of two Services holding one address
// without an IPAddress, the carry-over creates the older's claim first,
// and reports the newer.
func TestMigrateOldestFirst(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	ctx := t.Context()
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	svc := func(name string, age time.Duration, ip string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name + "-uid"), CreationTimestamp: metav1.NewTime(day.Add(-age))},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}},
		}
	}
	snap := newestFirst{client: srv.Client, services: []*corev1.Service{
		svc("newest", time.Hour, "10.0.0.7"), svc("middle", 2*time.Hour, "10.0.0.8"),
		svc("oldest", 3*time.Hour, "10.0.0.7"), svc("older", 4*time.Hour, "10.0.0.9"),
	}}
	rep, err := iprepair.MigrateToIPAddress(ctx, iprepair.MigrateConfig{Client: srv.Client, Snapshot: snap, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Created != 3 || len(rep.Problems) != 1 || rep.Problems[0].Service != "default/newest" {
		t.Fatalf("want 3 created and the newest Service reported: %+v", rep)
	}
	ipa, err := srv.Client.NetworkingV1().IPAddresses().Get(ctx, "10.0.0.7", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ipa.Spec.ParentRef.Name; got != "oldest" {
		t.Errorf("10.0.0.7 went to %s, want the oldest of its two Services", got)
	}
}
