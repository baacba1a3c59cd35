package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// claimsMatch checks that every Service IP has an IPAddress referencing its
// Service, and returns the number of Service IPs.
func claimsMatch(t *testing.T, ctx context.Context, c kubernetes.Interface) int {
	t.Helper()
	services, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, svc := range services.Items {
		for _, ip := range svc.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			n++
			obj, err := c.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
			if err != nil || !ipaddress.OwnedBy(obj, allocation.Owner{Namespace: svc.Namespace, Name: svc.Name}) || !ipaddress.IsManaged(obj) {
				t.Fatalf("IPAddress of %s/%s (%s): %v %+v", svc.Namespace, svc.Name, ip, err, obj)
			}
		}
	}
	return n
}

// TestModelSwitch starts a bitmap-model server, switches the same data to the
// IPAddress model and back: each switch carries the allocations over at
// start, so no address is ever handed out twice.
func TestModelSwitch(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	const cidr = "10.0.0.0/26"
	used := map[string]string{}
	createSome := func(c kubernetes.Interface, prefix string, n int) {
		t.Helper()
		for i := range n {
			svc := mustCreate(t, ctx, c, newService(fmt.Sprintf("%s-%02d", prefix, i)))
			if other, dup := used[svc.Spec.ClusterIP]; dup {
				t.Fatalf("%s handed out to %s and %s", svc.Spec.ClusterIP, other, svc.Name)
			}
			used[svc.Spec.ClusterIP] = svc.Name
		}
	}

	s := startServer(t, serverOptions{model: "bitmap", serviceRange: cidr, etcd: etcd})
	used["10.0.0.1"] = "kubernetes"
	createSome(s.client, "bitmap", 20)
	mustCreate(t, ctx, s.client, newService("static", withIP("10.0.0.5")))
	used["10.0.0.5"] = "static"
	s.stop()

	s = startServer(t, serverOptions{model: "ipaddress", serviceRange: cidr, etcd: etcd})
	if n := claimsMatch(t, ctx, s.client); n != 22 {
		t.Fatalf("%d Service IPs after the switch, want 22", n)
	}
	createSome(s.client, "ipaddress", 20)
	s.stop()

	s = startServer(t, serverOptions{model: "bitmap", serviceRange: cidr, etcd: etcd})
	store, err := clusterip.NewEtcdAllocator(etcd.Client(), "/registry/ranges/serviceips",
		subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for ip, name := range used {
		if has, err := store.Has(ctx, netip.MustParseAddr(ip)); err != nil || !has {
			t.Fatalf("%s of %s is not in the bitmap after switching back (%v)", ip, name, err)
		}
	}
	// The 62 usable addresses minus the 42 in use: exactly 20 more, all new.
	createSome(s.client, "back", 20)
	if _, err := create(ctx, s.client, newService("one-too-many")); err == nil || !strings.Contains(err.Error(), "range is full") {
		t.Fatalf("create in a full range: %v", err)
	}
}

// TestModelSwitchKubeAPIServer132 starts the IPAddress model on what
// kube-apiserver 1.32 wrote with the bitmap model: one IPAddress per Service
// IP appears, with the right parentRef.
func TestModelSwitchKubeAPIServer132(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := fixtures.Load(t, fixtures.Bitmap132)
	etcd := etcdtest.New(t)
	if _, err := fixtures.Put(ctx, etcd.Client(), f); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOptions{model: "ipaddress", serviceRange: "10.96.0.0/16", etcd: etcd})
	want := 0
	for _, ips := range f.Expect.Services {
		for _, ip := range ips {
			if ip != corev1.ClusterIPNone {
				want++
			}
		}
	}
	if n := claimsMatch(t, ctx, s.client); n != want {
		t.Fatalf("%d Service IPs, want %d", n, want)
	}
	list, err := s.client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != want {
		t.Fatalf("%d IPAddresses (%v), want exactly %d", len(list.Items), err, want)
	}
}

// TestMetricsEndpoint checks /metrics carries the allocator gauges from the
// start and counts allocations, with upstream's names.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	forEachModel(t, testMetricsEndpoint)
}

func testMetricsEndpoint(t *testing.T, model string) {
	ctx := testContext(t)
	s := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/24"})
	scrape := func() string { return scrapeMetrics(t, ctx, s.client) }
	text := scrape()
	for _, want := range []string{
		`kube_apiserver_clusterip_allocator_available_ips{cidr="10.0.0.0/24"}`,
		`kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.0.0.0/24"} 1`, // the kubernetes Service
		`allocator_clusterip_band_available_ips{band="static",cidr="10.0.0.0/24"}`,
		`apiserver_clusterip_repair_reconcile_errors_total`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	mustCreate(t, ctx, s.client, newService("counted"))
	text = scrape()
	modelMetrics := map[string][]string{
		"bitmap":    {`allocator_clusterip_bitmap_batches_total{cidr="10.0.0.0/24"}`, `allocator_clusterip_bitmap_cas_conflicts_total{cidr="10.0.0.0/24"}`},
		"ipaddress": {`allocator_clusterip_allocation_collisions_total{family="IPv4"}`},
	}
	for _, want := range modelMetrics[model] {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, want := range []string{
		`kube_apiserver_clusterip_allocator_allocation_total{cidr="10.0.0.0/24",scope="dynamic"}`,
		`kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.0.0.0/24"} 2`,
		`kube_apiserver_clusterip_allocator_allocation_duration_seconds_count{cidr="10.0.0.0/24"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics after a create lacks %s", want)
		}
	}
}

// TestRefusedServiceCIDRIsVisible: the default guardrails refuse an IPv6
// ServiceCIDR shorter than /64, naming the flag; without that bound it is
// stored (as upstream does) but not served, and says so in an event.
func TestRefusedServiceCIDRIsVisible(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	guarded := startServer(t, serverOptions{model: "ipaddress", serviceRange: "10.0.0.0/24,fd00::/112"})
	wide := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "wide"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"fd01::/48"}}}
	_, err := guarded.client.NetworkingV1().ServiceCIDRs().Create(ctx, wide, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "prefix length /48 is shorter than the shortest allowed, /64 (--service-cidr-min-prefix-length-ipv6)") {
		t.Fatalf("the default guardrails: %v, want 422 naming --service-cidr-min-prefix-length-ipv6", err)
	}
	guarded.stop()
	srv := testserver.Start(t, testserver.Options{Model: "ipaddress", ServiceRange: "10.0.0.0/24,fd00::/112", WithRepair: true,
		Flags: func(o *apiserver.Options) { o.Guardrails.IPv6.Min = 0 }})
	s := &server{client: srv.Client}
	if _, err := s.client.NetworkingV1().ServiceCIDRs().Create(ctx, wide, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "shortest allowed prefix length for service CIDR is 64, got 48"
	eventually(t, 30*time.Second, "the refusal event", func(ctx context.Context) (bool, error) {
		events, err := s.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "ServiceCIDR" && e.InvolvedObject.Name == "wide" &&
				e.Reason == apiserver.ReasonServiceCIDRNotServed && strings.Contains(e.Message, want) && strings.Contains(e.Message, "fd01::/48") {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestModelSwitchCarriesOverBeforeOpen starts the IPAddress model on what a
// bitmap-model kube-apiserver leaves (Services, no IPAddress, no default
// ServiceCIDR) with another ServiceCIDR beside. The server's repair carries
// the Services' addresses over in its first pass, which must wait for the
// default ServiceCIDR bootstrap creates: a pass before it would find every
// Service out of range and let the allocators open with none of their
// addresses claimed. So at readiness every address has its IPAddress, and
// the carry-over is quiet: no ClusterIPOutOfRange or ClusterIPNotAllocated
// event on any Service.
func TestModelSwitchCarriesOverBeforeOpen(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	const cidr = "10.0.0.0/26"
	for i := range 20 {
		repairtest.PlantService(t, etcd.Client(), metav1.NamespaceDefault, fmt.Sprintf("bitmap-%02d", i),
			[]string{fmt.Sprintf("10.0.0.%d", 10+i)}, time.Now())
	}
	extra, err := etcdlayout.Encode(&networkingv1.ServiceCIDR{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
		ObjectMeta: metav1.ObjectMeta{Name: "extra", UID: "extra-uid", CreationTimestamp: metav1.Now()},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/28"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(ctx, etcdlayout.Layout{}.ServiceCIDR("extra"), string(extra)); err != nil {
		t.Fatal(err)
	}

	s := startServer(t, serverOptions{model: "ipaddress", serviceRange: cidr, etcd: etcd})
	if n := claimsMatch(t, ctx, s.client); n != 21 {
		t.Fatalf("%d Service IPs claimed at readiness, want 21", n)
	}
	// A create after readiness cannot take a carried-over address.
	before := serviceIPs(t, ctx, s.client)
	svc := mustCreate(t, ctx, s.client, newService("after"))
	for name, ip := range before {
		if ip == svc.Spec.ClusterIP {
			t.Fatalf("%s handed out again; %s holds it", ip, name)
		}
	}
	time.Sleep(2 * time.Second) // events are recorded asynchronously
	events, err := s.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Service" && (e.Reason == report.ReasonOutOfRange || e.Reason == report.ReasonNotAllocated) {
			t.Errorf("event %s on Service %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
		}
	}
}
