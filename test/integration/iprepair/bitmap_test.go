package iprepair_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

const primaryKey = "/registry/ranges/serviceips"

func bitmapStore(t *testing.T, client *clientv3.Client, cidr string) *clusterip.EtcdAllocator {
	t.Helper()
	rng, err := subrange.New(netip.MustParsePrefix(cidr), model.Bitmap)
	if err != nil {
		t.Fatal(err)
	}
	store, err := clusterip.NewEtcdAllocator(client, primaryKey, rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func storedHas(t *testing.T, store *clusterip.EtcdAllocator, ip string) bool {
	t.Helper()
	has, err := store.Has(context.Background(), netip.MustParseAddr(ip))
	if err != nil {
		t.Fatal(err)
	}
	return has
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
	t.Parallel()
	ctx := repairtest.Context(t)
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
	repairtest.PlantService(t, etcd, "default", "no-bit", []string{"10.0.0.50"}, old)
	repairtest.PlantService(t, etcd, "default", "dup", []string{goodIP}, time.Now().Add(time.Hour))
	repairtest.PlantService(t, etcd, "default", "outside", []string{"10.9.9.9"}, old)
	repairtest.PlantService(t, etcd, "default", "garbage", []string{"not-an-ip"}, old)
	for _, name := range []string{"no-bit", "dup", "outside", "garbage"} {
		repairtest.WaitListed(t, srv, "default", name, true)
	}

	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client), LeakGrace: time.Nanosecond}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}

	// A dry run reports everything and changes nothing.
	dry, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, DryRun: true}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := store.ReadStored(ctx)
	rep, err := dry.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := store.ReadStored(ctx); after.Revision != before.Revision || rep.Writes != 0 {
		t.Fatalf("dry run wrote: revision %d → %d, writes %d", before.Revision, after.Revision, rep.Writes)
	}
	if p, ok := rep.Find(report.TypeRepair, "10.0.0.50"); !ok || p.Fixed {
		t.Fatalf("dry run: repair problem %+v %v", p, ok)
	}

	rep, err = ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	want := []struct{ typ, ip, service, reason, message string }{
		{report.TypeRepair, "10.0.0.50", "default/no-bit", report.ReasonNotAllocated, "Cluster IP [IPv4]:10.0.0.50 is not allocated; repairing"},
		{report.TypeDuplicate, goodIP, "default/dup", report.ReasonAlreadyAllocated, fmt.Sprintf("Cluster IP [IPv4]:%s was assigned to multiple services; please recreate service", goodIP)},
		{report.TypeOutOfRange, "10.9.9.9", "default/outside", report.ReasonOutOfRange, "Cluster IP [IPv4]:10.9.9.9 is not within the service CIDR 10.0.0.0/24; please recreate service"},
		{report.TypeInvalid, "not-an-ip", "default/garbage", report.ReasonNotValid, "Cluster IP not-an-ip is not a valid IP; please recreate service"},
	}
	for _, w := range want {
		p, ok := rep.Find(w.typ, w.ip)
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
			if rep, err = ctrl.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p, ok := rep.Find(report.TypeLeak, "10.0.0.200")
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
	if rep, err = ctrl.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if rep.Unresolved() != 3 || rep.Writes != 0 {
		t.Fatalf("after repair: %s, problems %+v", rep, rep.Problems)
	}
}

// TestBitmapRepairLeakCountForgotten checks that a leak count restarts when
// the address is in use again in between.
func TestBitmapRepairLeakCountForgotten(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	store := bitmapStore(t, etcd, "10.0.0.0/24")
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, LeakGrace: time.Nanosecond}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	const ip = "10.0.0.201"
	if err := store.Allocate(ctx, netip.MustParseAddr(ip), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	pass := func() *report.Report {
		t.Helper()
		r, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pass()
	pass() // two passes: one more would free it
	repairtest.PlantService(t, etcd, "default", "holder", []string{ip}, time.Now())
	repairtest.WaitListed(t, srv, "default", "holder", true)
	if _, leaked := pass().Find(report.TypeLeak, ip); leaked {
		t.Fatalf("%s reported leaked while a Service holds it", ip)
	}
	repairtest.DeletePlanted(t, etcd, "default", "holder")
	repairtest.WaitListed(t, srv, "default", "holder", false)
	for n := 1; n <= 2; n++ {
		if p, ok := pass().Find(report.TypeLeak, ip); !ok || p.Fixed {
			t.Fatalf("pass %d after the holder left: %+v %v; want a pending leak", n, p, ok)
		}
	}
	if p, ok := pass().Find(report.TypeLeak, ip); !ok || !p.Fixed || storedHas(t, store, ip) {
		t.Fatalf("3rd pass after the holder left: %+v %v; want freed", p, ok)
	}
}

func TestBitmapRepairGrace(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/24")
	now := time.Now()
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, LeakGrace: time.Minute, Now: func() time.Time { return now }}, Stores: []iprepair.BitmapStore{store}})
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
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/24")
	start := time.Now()
	now := start
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, Now: func() time.Time { return now }}, Stores: []iprepair.BitmapStore{store}})
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
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "bitmap"})
	etcd := srv.Etcd.Client()
	store := bitmapStore(t, etcd, "10.0.0.0/24")
	svc, err := createService(ctx, srv, "a", "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ctrl.RunOnce(ctx)
	if err != nil || !rep.Consistent() || rep.Writes != 0 {
		t.Fatalf("pass on a consistent cluster: %v, %v %+v", err, rep, rep.Problems)
	}
	if _, err := etcd.Delete(ctx, primaryKey); err != nil {
		t.Fatal(err)
	}
	rep, err = ctrl.RunOnce(ctx)
	if err != nil || rep.Writes != 1 {
		t.Fatalf("pass on a missing map: %v, %v", err, rep)
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
	t.Parallel()
	ctx, etcd, fx, srv := fixtureServer(t, fixtures.Bitmap132, "bitmap")
	store := bitmapStore(t, etcd.Client(), "10.96.0.0/16")
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ctrl.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Consistent() || rep.Writes != 0 || rep.Allocated != len(fx.Expect.Bitmaps[primaryKey].IPs) {
		t.Fatalf("repair on kube-apiserver 1.32 data: %s %+v", rep, rep.Problems)
	}
}
