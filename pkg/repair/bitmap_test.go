package repair_test

import (
	"context"
	"fmt"
	"github.com/allocator/allocator/pkg/repair"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/subrange"
)

const primaryKey = "/registry/ranges/serviceips"

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func bitmapStore(t *testing.T, client *clientv3.Client, cidr string) *bitmap.EtcdAllocator {
	t.Helper()
	rng, err := subrange.New(netip.MustParsePrefix(cidr), subrange.ModelBitmap)
	if err != nil {
		t.Fatal(err)
	}
	store, err := bitmap.NewEtcdAllocator(client, primaryKey, rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// plantService writes a Service straight into etcd, as an operator's or
// another component's mistake would, bypassing allocation.
func plantService(t *testing.T, client *clientv3.Client, namespace, name string, ips []string, created time.Time) {
	t.Helper()
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, UID: types.UID(uuid.NewUUID()),
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second)),
		},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ips[0],
			ClusterIPs: ips,
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}},
		},
	}
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatalf("encode planted service: %v", err)
	}
	if _, err := client.Put(context.Background(), etcdlayout.Layout{}.Service(namespace, name), string(value)); err != nil {
		t.Fatalf("plant service: %v", err)
	}
}

func deletePlanted(t *testing.T, client *clientv3.Client, namespace, name string) {
	t.Helper()
	if _, err := client.Delete(context.Background(), etcdlayout.Layout{}.Service(namespace, name)); err != nil {
		t.Fatal(err)
	}
}

// waitListed waits until the server lists the Service (its cache follows etcd).
func waitListed(t *testing.T, srv *testserver.Server, namespace, name string, present bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := srv.Client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		found := slices.ContainsFunc(list.Items, func(s corev1.Service) bool { return s.Name == name })
		return found == present, nil
	})
	if err != nil {
		t.Fatalf("service %s/%s listed=%v: %v", namespace, name, present, err)
	}
}

func storedHas(t *testing.T, store *bitmap.EtcdAllocator, ip string) bool {
	t.Helper()
	has, err := store.Has(context.Background(), netip.MustParseAddr(ip))
	if err != nil {
		t.Fatal(err)
	}
	return has
}

func findProblem(r *repair.Report, typ, ip string) (repair.Problem, bool) {
	for _, p := range r.Problems {
		if p.Type == typ && p.IP == ip {
			return p, true
		}
	}
	return repair.Problem{}, false
}

func createService(ctx context.Context, srv *testserver.Server, name, clusterIP string) (*corev1.Service, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
	return srv.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{})
}

func TestBitmapRepairPlantedFaults(t *testing.T) {
	ctx := testContext(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	store := bitmapStore(t, etcd, "10.0.0.0/24")

	good, err := createService(ctx, srv, "good", "10.0.0.30") // static: a dynamic pick could land on a planted address
	if err != nil {
		t.Fatal(err)
	}
	goodIP := good.Spec.ClusterIP
	// A bit with no Service.
	if err := store.Allocate(ctx, netip.MustParseAddr("10.0.0.200"), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	plantService(t, etcd, "default", "no-bit", []string{"10.0.0.50"}, old)
	plantService(t, etcd, "default", "dup", []string{goodIP}, time.Now().Add(time.Hour))
	plantService(t, etcd, "default", "outside", []string{"10.9.9.9"}, old)
	plantService(t, etcd, "default", "garbage", []string{"not-an-ip"}, old)
	for _, name := range []string{"no-bit", "dup", "outside", "garbage"} {
		waitListed(t, srv, "default", name, true)
	}

	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{
		Client: srv.Client, Stores: []repair.BitmapStore{store}, Recorder: repair.NewEventRecorder(ctx, srv.Client),
		LeakGrace: time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}

	// A dry run reports everything and changes nothing.
	dry, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := store.ReadStored(ctx)
	report, err := dry.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := store.ReadStored(ctx); after.Revision != before.Revision || report.Writes != 0 {
		t.Fatalf("dry run wrote: revision %d → %d, writes %d", before.Revision, after.Revision, report.Writes)
	}
	if p, ok := findProblem(report, repair.TypeRepair, "10.0.0.50"); !ok || p.Fixed {
		t.Fatalf("dry run: repair problem %+v %v", p, ok)
	}

	report, err = ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report)
	want := []struct{ typ, ip, service, reason, message string }{
		{repair.TypeRepair, "10.0.0.50", "default/no-bit", repair.ReasonNotAllocated, "Cluster IP [IPv4]:10.0.0.50 is not allocated; repairing"},
		{repair.TypeDuplicate, goodIP, "default/dup", repair.ReasonAlreadyAllocated, fmt.Sprintf("Cluster IP [IPv4]:%s was assigned to multiple services; please recreate service", goodIP)},
		{repair.TypeOutOfRange, "10.9.9.9", "default/outside", repair.ReasonOutOfRange, "Cluster IP [IPv4]:10.9.9.9 is not within the service CIDR 10.0.0.0/24; please recreate service"},
		{repair.TypeInvalid, "not-an-ip", "default/garbage", repair.ReasonNotValid, "Cluster IP not-an-ip is not a valid IP; please recreate service"},
	}
	for _, w := range want {
		p, ok := findProblem(report, w.typ, w.ip)
		if !ok || p.Service != w.service || p.Reason != w.reason || p.Message != w.message {
			t.Errorf("problem %s %s = %+v (found %v), want service %s reason %s message %q", w.typ, w.ip, p, ok, w.service, w.reason, w.message)
		}
	}
	for _, w := range want {
		waitObjectEvent(t, srv, "Service", "default", strings.TrimPrefix(w.service, "default/"), w.reason, w.message)
	}
	if !storedHas(t, store, "10.0.0.50") || !storedHas(t, store, goodIP) {
		t.Fatalf("pass 1 did not re-mark the planted Service's IP or dropped the good one")
	}
	if storedHas(t, store, "10.9.9.9") {
		t.Fatalf("out-of-range IP marked")
	}

	// The leak is freed on the 3rd pass that sees it, not earlier.
	for pass := 1; pass <= 3; pass++ {
		if pass > 1 {
			if report, err = ctrl.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p, ok := findProblem(report, repair.TypeLeak, "10.0.0.200")
		if !ok || p.Fixed != (pass == 3) {
			t.Fatalf("pass %d: leak problem %+v (found %v)", pass, p, ok)
		}
		if has := storedHas(t, store, "10.0.0.200"); has != (pass < 3) {
			t.Fatalf("pass %d: leaked 10.0.0.200 allocated = %v", pass, has)
		}
	}
	// The Services themselves were never changed.
	dup, err := srv.Client.CoreV1().Services("default").Get(ctx, "dup", metav1.GetOptions{})
	if err != nil || dup.Spec.ClusterIP != goodIP {
		t.Fatalf("duplicate Service changed: %v %v", dup, err)
	}
	// What is left is what only a person can fix.
	if report, err = ctrl.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if report.Unresolved() != 3 || report.Writes != 0 {
		t.Fatalf("after repair: %s, problems %+v", report, report.Problems)
	}
}

// TestBitmapRepairLeakCountForgotten checks that a leak count restarts when
// the address is in use again in between.
func TestBitmapRepairLeakCountForgotten(t *testing.T) {
	ctx := testContext(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	store := bitmapStore(t, etcd, "10.0.0.0/24")
	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store}, LeakGrace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	const ip = "10.0.0.201"
	if err := store.Allocate(ctx, netip.MustParseAddr(ip), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	pass := func() *repair.Report {
		t.Helper()
		r, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pass()
	pass() // two passes: one more would free it
	plantService(t, etcd, "default", "holder", []string{ip}, time.Now())
	waitListed(t, srv, "default", "holder", true)
	if _, leaked := findProblem(pass(), repair.TypeLeak, ip); leaked {
		t.Fatalf("%s reported leaked while a Service holds it", ip)
	}
	deletePlanted(t, etcd, "default", "holder")
	waitListed(t, srv, "default", "holder", false)
	for n := 1; n <= 2; n++ {
		if p, ok := findProblem(pass(), repair.TypeLeak, ip); !ok || p.Fixed {
			t.Fatalf("pass %d after the holder left: %+v %v; want a pending leak", n, p, ok)
		}
	}
	if p, ok := findProblem(pass(), repair.TypeLeak, ip); !ok || !p.Fixed || storedHas(t, store, ip) {
		t.Fatalf("3rd pass after the holder left: %+v %v; want freed", p, ok)
	}
}

func TestBitmapRepairGrace(t *testing.T) {
	ctx := testContext(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/24")
	now := time.Now()
	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store},
		LeakGrace: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Allocate(ctx, netip.MustParseAddr("10.0.0.99"), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := ctrl.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !storedHas(t, store, "10.0.0.99") {
		t.Fatalf("leak freed by back-to-back passes inside the grace period")
	}
	now = now.Add(time.Minute)
	if _, err := ctrl.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if storedHas(t, store, "10.0.0.99") {
		t.Fatalf("leak not freed once the grace period passed")
	}
}

// TestBitmapRepairDefaultGraceOutlastsRequestTimeout: with the default
// grace, a suspected leak survives every pass until the request timeout
// (60 s, how long a create may hold a reserved address before its Service is
// stored) plus a margin has passed since the first pass saw it. The old
// default (1 min) freed it 61 s in, the one-shot job's (10 s) sooner still.
func TestBitmapRepairDefaultGraceOutlastsRequestTimeout(t *testing.T) {
	ctx := testContext(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/24")
	start := time.Now()
	now := start
	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store},
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Allocate(ctx, netip.MustParseAddr("10.0.0.99"), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 61 * time.Second, 75 * time.Second} {
		now = start.Add(at)
		if _, err := ctrl.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if !storedHas(t, store, "10.0.0.99") {
			t.Fatalf("suspected leak freed %v after it was first seen, within the request timeout plus margin", at)
		}
	}
	now = start.Add(repair.DefaultLeakGrace)
	if _, err := ctrl.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if storedHas(t, store, "10.0.0.99") {
		t.Fatalf("leak not freed once the default grace (%v) passed", repair.DefaultLeakGrace)
	}
	if repair.DefaultLeakGrace <= repair.RequestTimeout {
		t.Fatalf("DefaultLeakGrace %v does not exceed the request timeout %v", repair.DefaultLeakGrace, repair.RequestTimeout)
	}
}

func TestBitmapRepairCreatesMissingMapAndIsQuietWhenConsistent(t *testing.T) {
	ctx := testContext(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	store := bitmapStore(t, etcd, "10.0.0.0/24")
	svc, err := createService(ctx, srv, "a", "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	report, err := ctrl.RunOnce(ctx)
	if err != nil || !report.Consistent() || report.Writes != 0 {
		t.Fatalf("pass on a consistent cluster: %v, %v %+v", err, report, report.Problems)
	}
	if _, err := etcd.Delete(ctx, primaryKey); err != nil {
		t.Fatal(err)
	}
	report, err = ctrl.RunOnce(ctx)
	if err != nil || report.Writes != 1 {
		t.Fatalf("pass on a missing map: %v, %v", err, report)
	}
	for _, ip := range []string{"10.0.0.1", svc.Spec.ClusterIP} {
		if !storedHas(t, store, ip) {
			t.Fatalf("recreated map lacks %s", ip)
		}
	}
}

// TestBitmapRepairRaceWithCreates runs repair passes back to back while
// Services are created: no Service loses its IP, none is handed out twice.
// TestBitmapRepairKubeAPIServer132 serves what kube-apiserver 1.32 wrote and
// checks that a repair pass finds it consistent.
func TestBitmapRepairKubeAPIServer132(t *testing.T) {
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	fx := fixtures.Load(t, fixtures.Bitmap132)
	if _, err := fixtures.Put(ctx, etcd.Client(), fx); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/16", Model: "bitmap", Etcd: etcd})
	store := bitmapStore(t, etcd.Client(), "10.96.0.0/16")
	ctrl, err := repair.NewBitmapRepair(repair.BitmapConfig{Client: srv.Client, Stores: []repair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	report, err := ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !report.Consistent() || report.Writes != 0 || report.Allocated != len(fx.Expect.Bitmaps[primaryKey].IPs) {
		t.Fatalf("repair on kube-apiserver 1.32 data: %s %+v", report, report.Problems)
	}
}
