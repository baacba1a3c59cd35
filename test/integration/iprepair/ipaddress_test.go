package iprepair_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// ourLabels are the labels kube-apiserver's allocator (and ours) writes.
func ourLabels(family string) map[string]string {
	return map[string]string{ipaddress.LabelIPFamily: family, ipaddress.LabelManagedBy: ipaddress.ManagedBy}
}

func serviceRef(namespace, name string) *networkingv1.ParentReference {
	return &networkingv1.ParentReference{Resource: "services", Namespace: namespace, Name: name}
}

// plantIPAddress writes an IPAddress straight into etcd and waits until the
// server serves it.
func plantIPAddress(t *testing.T, srv *testserver.Server, name string, parent *networkingv1.ParentReference, labels map[string]string, created time.Time) {
	t.Helper()
	plantIPAddressObject(t, srv, newPlanted(name, parent, labels, created))
}

// newPlanted is the IPAddress plantIPAddress writes.
func newPlanted(name string, parent *networkingv1.ParentReference, labels map[string]string, created time.Time) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "IPAddress"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(uuid.NewUUID()), Labels: labels,
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second)),
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: parent},
	}
}

// plantIPAddressObject writes obj to etcd as it is and waits until the
// server lists it.
func plantIPAddressObject(t *testing.T, srv *testserver.Server, obj *networkingv1.IPAddress) {
	t.Helper()
	name := obj.Name
	value, err := etcdlayout.Encode(obj)
	if err != nil {
		t.Fatalf("encode planted ipaddress: %v", err)
	}
	if _, err := srv.Etcd.Client().Put(context.Background(), etcdlayout.Layout{}.IPAddress(name), string(value)); err != nil {
		t.Fatalf("plant ipaddress: %v", err)
	}
	waitIPAddress(t, srv, name, true)
}

// waitIPAddress waits until the server lists the IPAddress (present) or not.
func waitIPAddress(t *testing.T, srv *testserver.Server, name string, present bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := srv.Client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		found := slices.ContainsFunc(list.Items, func(o networkingv1.IPAddress) bool { return o.Name == name })
		return found == present, nil
	})
	if err != nil {
		t.Fatalf("ipaddress %s listed=%v: %v", name, present, err)
	}
}

func getIPAddress(t *testing.T, srv *testserver.Server, name string) *networkingv1.IPAddress {
	t.Helper()
	obj, err := srv.Client.NetworkingV1().IPAddresses().Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// checkClaim fails unless ip has our IPAddress referencing namespace/name.
func checkClaim(t *testing.T, srv *testserver.Server, ip, namespace, name string) {
	t.Helper()
	obj := getIPAddress(t, srv, ip)
	if obj == nil {
		t.Errorf("no IPAddress %s for %s/%s", ip, namespace, name)
		return
	}
	family := "IPv4"
	if strings.Contains(ip, ":") {
		family = "IPv6"
	}
	if diff := cmp.Diff(serviceRef(namespace, name), obj.Spec.ParentRef); diff != "" {
		t.Errorf("IPAddress %s parentRef (-want +got):\n%s", ip, diff)
	}
	if diff := cmp.Diff(ourLabels(family), obj.Labels); diff != "" {
		t.Errorf("IPAddress %s labels (-want +got):\n%s", ip, diff)
	}
}

// waitObjectEvent waits for a Warning event of the repair on the object.
func waitObjectEvent(t *testing.T, srv *testserver.Server, kind, namespace, name, reason, message string) {
	t.Helper()
	eventNS := namespace
	if eventNS == "" {
		eventNS = metav1.NamespaceDefault // cluster-scoped objects' events
	}
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := srv.Client.CoreV1().Events(eventNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason+": "+e.Message)
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason &&
				e.Message == message && e.Type == corev1.EventTypeWarning && e.Source.Component == report.Component {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event %q on %s %s; events: %q", reason, message, kind, name, seen)
	}
}

// fakeClock is a settable clock safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func runOnce(t *testing.T, ctx context.Context, r *iprepair.IPAddressRepair) *report.Report {
	t.Helper()
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	t.Log(rep)
	return rep
}

func ipaddressServer(t *testing.T, cidr string) *testserver.Server {
	return testserver.Start(t, testserver.Options{ServiceRange: cidr, Model: "ipaddress"})
}

func TestIPAddressRepairOrphanGrace(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	created := time.Now().Truncate(time.Second)
	plantIPAddress(t, srv, "10.0.0.200", serviceRef("default", "ghost"), ourLabels("IPv4"), created)

	clock := &fakeClock{now: created.Add(10 * time.Second)}
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client), OrphanGrace: 30 * time.Second, Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // back-to-back passes inside the grace period delete nothing
		rep := runOnce(t, ctx, ctrl)
		if p, ok := rep.Find(report.TypeLeak, "10.0.0.200"); !ok || p.Fixed || rep.Writes != 0 {
			t.Fatalf("inside the grace period: %+v %v, %s", p, ok, rep)
		}
		if getIPAddress(t, srv, "10.0.0.200") == nil {
			t.Fatalf("orphan deleted inside the grace period")
		}
	}

	clock.Set(created.Add(31 * time.Second))
	rep := runOnce(t, ctx, ctrl)
	const msg = "IPAddress: 10.0.0.200 for Service default/ghost appears to have leaked: cleaning up"
	p, ok := rep.Find(report.TypeLeak, "10.0.0.200")
	if !ok || !p.Fixed || p.Reason != report.ReasonIPNotAllocated || p.Message != msg || rep.Writes != 1 {
		t.Fatalf("after the grace period: %+v %v, %s", p, ok, rep)
	}
	if getIPAddress(t, srv, "10.0.0.200") != nil {
		t.Fatalf("orphan not deleted after the grace period")
	}
	waitObjectEvent(t, srv, "IPAddress", "", "10.0.0.200", report.ReasonIPNotAllocated, msg)
	if rep := runOnce(t, ctx, ctrl); !rep.Consistent() {
		t.Fatalf("after the delete: %+v", rep.Problems)
	}
}

func TestIPAddressRepairPlantedFaults(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	etcd := srv.Etcd.Client()
	good, err := createService(ctx, srv, "good", "10.0.0.30") // static: a dynamic pick could land on a planted address
	if err != nil {
		t.Fatal(err)
	}
	goodIP := good.Spec.ClusterIP
	old, older := time.Now().Add(-time.Hour), time.Now().Add(-2*time.Hour)
	newer := time.Now().Add(time.Hour)

	repairtest.PlantService(t, etcd, "default", "no-ip", []string{"10.0.0.50"}, old)
	repairtest.PlantService(t, etcd, "default", "dup", []string{goodIP}, older) // older, but the IPAddress decides
	repairtest.PlantService(t, etcd, "default", "pair-a", []string{"10.0.0.60"}, old)
	repairtest.PlantService(t, etcd, "default", "pair-b", []string{"10.0.0.60"}, newer)
	repairtest.PlantService(t, etcd, "default", "outside", []string{"10.9.9.9"}, old)
	repairtest.PlantService(t, etcd, "default", "garbage", []string{"not-an-ip"}, old)
	// Wrong references: to a Service that is gone, and to one that exists
	// but does not hold the address.
	repairtest.PlantService(t, etcd, "default", "wr", []string{"10.0.0.70"}, old)
	plantIPAddress(t, srv, "10.0.0.70", serviceRef("default", "ghost"), ourLabels("IPv4"), old)
	repairtest.PlantService(t, etcd, "default", "wr2", []string{"10.0.0.71"}, old)
	plantIPAddress(t, srv, "10.0.0.71", serviceRef("default", "good"), ourLabels("IPv4"), old)
	// Managed by someone else: an orphan, and one blocking a Service's address.
	foreign := map[string]string{ipaddress.LabelIPFamily: "IPv4", ipaddress.LabelManagedBy: "someone-else"}
	plantIPAddress(t, srv, "10.0.0.80", serviceRef("default", "ghost2"), foreign, old)
	repairtest.PlantService(t, etcd, "default", "blocked", []string{"10.0.0.81"}, old)
	plantIPAddress(t, srv, "10.0.0.81", &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default", Name: "gw"}, foreign, old)
	// Ours, with the wrong family label, and annotations the repair's view
	// does not keep (the Service UID) or does: a fix must leave both.
	repairtest.PlantService(t, etcd, "default", "lbl", []string{"10.0.0.90"}, old)
	lbl := newPlanted("10.0.0.90", serviceRef("default", "lbl"), ourLabels("IPv6"), old)
	lblAnnotations := map[string]string{ipaddress.AnnotationServiceUID: "uid-lbl", "example.com/note": "kept"}
	lbl.Annotations = maps.Clone(lblAnnotations)
	plantIPAddressObject(t, srv, lbl)
	for _, name := range []string{"no-ip", "dup", "pair-a", "pair-b", "outside", "garbage", "wr", "wr2", "blocked", "lbl"} {
		repairtest.WaitListed(t, srv, "default", name, true)
	}
	foreignBefore := map[string]*networkingv1.IPAddress{"10.0.0.80": getIPAddress(t, srv, "10.0.0.80"), "10.0.0.81": getIPAddress(t, srv, "10.0.0.81")}

	// A dry run reports and writes nothing.
	dry, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Each IPAddress's resourceVersion, not the list's: the list's is etcd's
	// revision, which any write of the server moves (a ServiceCIDR's
	// conditions, an event), and a dry run must only leave the IPAddresses be.
	versions := func() map[string]string {
		list, err := srv.Client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, ip := range list.Items {
			out[ip.Name] = ip.ResourceVersion
		}
		return out
	}
	before := versions()
	rep := runOnce(t, ctx, dry)
	if diff := cmp.Diff(before, versions()); rep.Writes != 0 || diff != "" {
		t.Fatalf("dry run wrote: %s; IPAddresses (name: resourceVersion) (-before +after):\n%s", rep, diff)
	}
	if p, ok := rep.Find(report.TypeRepair, "10.0.0.50"); !ok || p.Fixed {
		t.Fatalf("dry run: %+v %v", p, ok)
	}

	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client)}})
	if err != nil {
		t.Fatal(err)
	}
	rep = runOnce(t, ctx, ctrl)
	type want struct {
		typ, ip, service, reason, message string
		fixed                             bool
		kind, on                          string // the event's object
	}
	wants := []want{
		{report.TypeRepair, "10.0.0.50", "default/no-ip", report.ReasonNotAllocated, "Cluster IP [IPv4]: 10.0.0.50 is not allocated; repairing", true, "Service", "no-ip"},
		{report.TypeDuplicate, goodIP, "default/dup", report.ReasonAlreadyAllocated, fmt.Sprintf("Cluster IP [IPv4]:%s was assigned to multiple services; please recreate service", goodIP), false, "Service", "dup"},
		{report.TypeRepair, "10.0.0.60", "default/pair-a", report.ReasonNotAllocated, "Cluster IP [IPv4]: 10.0.0.60 is not allocated; repairing", true, "Service", "pair-a"},
		{report.TypeDuplicate, "10.0.0.60", "default/pair-b", report.ReasonAlreadyAllocated, "Cluster IP [IPv4]:10.0.0.60 was assigned to multiple services; please recreate service", false, "Service", "pair-b"},
		{report.TypeOutOfRange, "10.9.9.9", "default/outside", report.ReasonOutOfRange, "Cluster IP [IPv4]: 10.9.9.9 is not within any configured Service CIDR; please recreate service", false, "Service", "outside"},
		{report.TypeInvalid, "not-an-ip", "default/garbage", report.ReasonNotValid, "Cluster IP not-an-ip is not a valid IP; please recreate Service", false, "Service", "garbage"},
		{report.TypeRepair, "10.0.0.70", "default/wr", report.ReasonNotAllocated, "the ClusterIP [IPv4]: 10.0.0.70 for Service default/wr has a wrong reference; repairing", true, "Service", "wr"},
		{report.TypeRepair, "10.0.0.71", "default/wr2", report.ReasonWrongReference, "IPAddress: 10.0.0.71 for Service default/good has a wrong reference; cleaning up", true, "IPAddress", "10.0.0.71"},
		{report.TypeDuplicate, "10.0.0.81", "default/blocked", report.ReasonAlreadyAllocated, "Cluster IP [IPv4]:10.0.0.81 was assigned to multiple services; please recreate service", false, "Service", "blocked"},
		{report.TypeLeak, "10.0.0.80", "default/ghost2", "", "", false, "", ""},
		{report.TypeRepair, "10.0.0.90", "default/lbl", "", `IPAddress 10.0.0.90 has the label ipaddress.kubernetes.io/ip-family="IPv6"; repairing`, true, "", ""},
	}
	for _, w := range wants {
		p, ok := rep.Find(w.typ, w.ip)
		if !ok || p.Service != w.service || p.Reason != w.reason || (w.message != "" && p.Message != w.message) || p.Fixed != w.fixed {
			t.Errorf("problem %s %s = %+v (found %v), want %+v", w.typ, w.ip, p, ok, w)
		}
	}
	if len(rep.Problems) != len(wants) {
		t.Errorf("%d problems, want %d: %+v", len(rep.Problems), len(wants), rep.Problems)
	}
	for _, w := range wants {
		if w.kind != "" {
			ns := "default"
			if w.kind == "IPAddress" {
				ns = ""
			}
			waitObjectEvent(t, srv, w.kind, ns, w.on, w.reason, w.message)
		}
	}

	checkClaim(t, srv, "10.0.0.50", "default", "no-ip")
	checkClaim(t, srv, goodIP, "default", "good")
	checkClaim(t, srv, "10.0.0.60", "default", "pair-a")
	checkClaim(t, srv, "10.0.0.70", "default", "wr")
	checkClaim(t, srv, "10.0.0.71", "default", "wr2")
	checkClaim(t, srv, "10.0.0.90", "default", "lbl")
	if got := getIPAddress(t, srv, "10.0.0.90"); got == nil || !maps.Equal(got.Annotations, lblAnnotations) {
		t.Errorf("IPAddress 10.0.0.90 after its label was fixed: %+v, want the annotations %v kept", got, lblAnnotations)
	}
	// The fix's merge patch carries the resourceVersion the repair saw: the
	// server refuses it on an object changed since.
	stale := []byte(`{"metadata":{"resourceVersion":"1","labels":{"ipaddress.kubernetes.io/ip-family":"IPv6"}}}`)
	if _, err := srv.Client.NetworkingV1().IPAddresses().Patch(ctx, "10.0.0.90", types.MergePatchType, stale, metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("a label patch at a stale resourceVersion: %v, want a conflict", err)
	}
	if getIPAddress(t, srv, "10.9.9.9") != nil {
		t.Errorf("out-of-range address claimed")
	}
	for name, was := range foreignBefore {
		now := getIPAddress(t, srv, name)
		if now == nil || now.UID != was.UID || now.ResourceVersion != was.ResourceVersion {
			t.Errorf("foreign IPAddress %s touched: %+v", name, now)
		}
	}

	// What is left is what only a person (or its owner) can fix.
	rep = runOnce(t, ctx, ctrl)
	if rep.Unresolved() != 6 || len(rep.Problems) != 6 || rep.Writes != 0 {
		t.Fatalf("second pass: %s %+v", rep, rep.Problems)
	}
}

// TestIPAddressRepairKubeAPIServer136 checks that the IPAddresses
// kube-apiserver 1.36 wrote (including the extra ServiceCIDR) are consistent.
func TestIPAddressRepairKubeAPIServer136(t *testing.T) {
	t.Parallel()
	ctx, _, fx, srv := fixtureServer(t, fixtures.IPAddress136, "ipaddress")
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client}})
	if err != nil {
		t.Fatal(err)
	}
	rep := runOnce(t, ctx, ctrl)
	if !rep.Consistent() || rep.Writes != 0 || rep.Allocated != len(fx.Expect.IPAddresses) {
		t.Fatalf("repair on kube-apiserver 1.36 data: %s %+v", rep, rep.Problems)
	}
}

// TestIPAddressRepairMigratesKubeAPIServer132 serves what a bitmap-model
// kube-apiserver 1.32 wrote with the IPAddress model: one pass creates
// exactly one IPAddress per Service IP.
func TestIPAddressRepairMigratesKubeAPIServer132(t *testing.T) {
	t.Parallel()
	ctx, _, fx, srv := fixtureServer(t, fixtures.Bitmap132, "ipaddress")
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client)}})
	if err != nil {
		t.Fatal(err)
	}
	rep := runOnce(t, ctx, ctrl)
	if rep.Unresolved() != 0 {
		t.Fatalf("migration pass left problems: %+v", rep.Problems)
	}
	want := map[string]string{} // ip → namespace/name
	for svc, ips := range fx.Expect.Services {
		for _, ip := range ips {
			if ip != corev1.ClusterIPNone {
				want[ip] = svc
			}
		}
	}
	list, err := srv.Client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, obj := range list.Items {
		got[obj.Name] = obj.Spec.ParentRef.Namespace + "/" + obj.Spec.ParentRef.Name
		if diff := cmp.Diff(ourLabels("IPv4"), obj.Labels); diff != "" || obj.Spec.ParentRef.Resource != "services" || obj.Spec.ParentRef.Group != "" {
			t.Errorf("IPAddress %s: parentRef %+v, labels (-want +got):\n%s", obj.Name, obj.Spec.ParentRef, diff)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("IPAddresses after migration (-want +got):\n%s", diff)
	}
	if rep.Allocated != len(want) {
		t.Errorf("report says %d allocated, want %d", rep.Allocated, len(want))
	}
	if rep = runOnce(t, ctx, ctrl); !rep.Consistent() || rep.Writes != 0 {
		t.Fatalf("second pass: %s %+v", rep, rep.Problems)
	}
}

// TestIPAddressRepairRaceWithCreates runs passes back to back, and the
// event-driven controller, while Services are created: no Service loses its
// IPAddress, none gets a duplicate.
// TestIPAddressRepairRun checks the event-driven controller: a Service
// planted without an IPAddress gets one, an orphan goes after its grace
// period, both without waiting for the periodic pass.
func TestIPAddressRepairRun(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client), Interval: time.Hour, OrphanGrace: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	stopRun := runRepair(ctx, t, ctrl)

	repairtest.PlantService(t, srv.Etcd.Client(), "default", "planted", []string{"10.0.0.33"}, time.Now())
	plantIPAddress(t, srv, "10.0.0.34", serviceRef("default", "ghost"), ourLabels("IPv4"), time.Now())
	waitIPAddress(t, srv, "10.0.0.34", false)
	waitObjectEvent(t, srv, "IPAddress", "", "10.0.0.34", report.ReasonIPNotAllocated,
		"IPAddress: 10.0.0.34 for Service default/ghost appears to have leaked: cleaning up")
	waitIPAddress(t, srv, "10.0.0.33", true)
	checkClaim(t, srv, "10.0.0.33", "default", "planted")
	waitObjectEvent(t, srv, "Service", "default", "planted", report.ReasonNotAllocated, "Cluster IP [IPv4]: 10.0.0.33 is not allocated; repairing")

	stopRun()
}

// TestIPAddressRepairRunServiceCIDRAdded: in Run (informer-driven), a
// Service holding an address outside every ServiceCIDR gets no IPAddress;
// once a ServiceCIDR covering it is created, the repair looks at the
// addresses inside it at once (not at the next full pass, an hour away
// here) and claims it. The parsed ServiceCIDRs are cached between
// reconciles; this checks the cache follows the change.
func TestIPAddressRepairRunServiceCIDRAdded(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, Recorder: report.NewEventRecorder(ctx, srv.Client), Interval: time.Hour, OrphanGrace: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	stopRun := runRepair(ctx, t, ctrl)

	repairtest.PlantService(t, srv.Etcd.Client(), "default", "outside", []string{"10.1.0.7"}, time.Now())
	time.Sleep(time.Second) // the repair sees it, out of range: no IPAddress
	if getIPAddress(t, srv, "10.1.0.7") != nil {
		t.Fatal("an IPAddress was created for an address outside every ServiceCIDR")
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "more"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}}}
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIPAddress(t, srv, "10.1.0.7", true)
	checkClaim(t, srv, "10.1.0.7", "default", "outside")

	stopRun()
}

// runRepair runs ctrl until the returned stop is called, after its first
// pass; stop fails the test if Run fails or does not return.
func runRepair(ctx context.Context, t *testing.T, ctrl *iprepair.IPAddressRepair) (stop func()) {
	t.Helper()
	firstPass, stop := startRepair(ctx, t, ctrl)
	select {
	case <-firstPass:
	case <-ctx.Done():
		stop()
		t.Fatal("no first pass")
	}
	return stop
}

// startRepair starts ctrl's Run, which closes firstPass after its first
// pass; stop ends it and fails the test if Run fails or does not return.
func startRepair(ctx context.Context, t *testing.T, ctrl *iprepair.IPAddressRepair) (firstPass <-chan struct{}, stop func()) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel) // a test that fails before stop
	runDone := make(chan error, 1)
	passed := make(chan struct{})
	go func() { runDone <- ctrl.Run(runCtx, passed) }()
	return passed, func() {
		cancel()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not stop")
		}
	}
}
