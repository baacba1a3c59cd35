package iprepair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair"
)

// TestStoredView: a view read from etcd holds what a view of the API's
// lists of the same objects holds (the keys, each key's holders oldest
// first, the IPAddresses, the ranges, a scoped ServiceCIDR's namespace
// labels), over more Services than one page, each object's
// resourceVersion its ModRevision; a write after the read is not in it;
// a value that does not decode fails the view, naming its key.
func TestStoredView(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	client := e.Client()
	layout := etcdlayout.Layout{Prefix: "/registry"}

	cluster := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24", "fd00::/120"}}}
	scoped := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "team",
		Annotations: map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/16"}}}
	objs := []runtime.Object{cluster, scoped,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"team": "a"}}},
		viewService("shared-old", -time.Hour, "10.0.0.1"), viewService("shared-new", 0, "10.0.0.1"),
		viewService("dual", 0, "10.0.0.2", "fd00::2"), viewService("outside", 0, "192.0.2.1"),
		viewIPAddress("10.0.0.1", "shared-old"), viewIPAddress("10.0.0.9", "gone"),
	}
	for i := range 6000 { // more than one page (report.ListPageSize)
		objs = append(objs, viewService(fmt.Sprintf("many-%04d", i), time.Duration(i)*time.Second,
			fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)))
	}
	putAll(t, ctx, client, layout, objs)

	// A Service stored after the view's first read and before it reads the
	// Services: the view reads everything at the first read's revision.
	later, err := etcdlayout.Encode(viewService("later", 0, "10.0.0.50"))
	if err != nil {
		t.Fatal(err)
	}
	kv := &writeBeforeRead{KV: client.KV, prefix: layout.ServicesPrefix(), write: func() {
		if _, err := client.Put(ctx, layout.Service("default", "later"), string(later)); err != nil {
			t.Error(err)
		}
	}}
	stored, err := newStoredView(ctx, kv, layout, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !kv.wrote.Load() {
		t.Fatal("the view never read the Services")
	}
	listed, err := newListView(ctx, fake.NewClientset(objs...))
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := mustKeys(t, listed)
	if diff := cmp.Diff(wantKeys, mustKeys(t, stored)); diff != "" {
		t.Errorf("keys (-listed +stored):\n%s", diff)
	}
	names := func(svcs []*corev1.Service) []string {
		var out []string
		for _, s := range svcs {
			out = append(out, s.Name)
		}
		return out
	}
	for _, k := range wantKeys {
		want, _ := listed.holders(k)
		got, _ := stored.holders(k)
		if diff := cmp.Diff(names(want), names(got)); diff != "" {
			t.Errorf("holders of %s (-listed +stored):\n%s", k, diff)
		}
		wantIP, _ := listed.ipAddress(k)
		gotIP, _ := stored.ipAddress(k)
		if (wantIP == nil) != (gotIP == nil) || wantIP != nil && !cmp.Equal(wantIP.Spec, gotIP.Spec) {
			t.Errorf("IPAddress %s: listed %v, stored %v", k, wantIP, gotIP)
		}
	}
	wantRanges, _ := listed.cidrs()
	gotRanges, _ := stored.cidrs()
	if len(gotRanges.ranges) != len(wantRanges.ranges) || !gotRanges.scoped {
		t.Errorf("ranges: %d stored (scoped %v), %d listed", len(gotRanges.ranges), gotRanges.scoped, len(wantRanges.ranges))
	}
	if got, _ := stored.namespaceLabels("default"); got["team"] != "a" {
		t.Errorf("namespace default's labels %v, want team=a", got)
	}
	if got, _ := stored.service("default", "later"); got != nil {
		t.Error("a Service written after the view's first read is in the view")
	}
	svc, _ := stored.service("default", "dual")
	resp, err := client.Get(ctx, layout.Service("default", "dual"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatInt(resp.Kvs[0].ModRevision, 10); svc == nil || svc.ResourceVersion != want {
		t.Errorf("Service dual's resourceVersion %v, want its ModRevision %s", svc, want)
	}

	bad := layout.IPAddress("10.0.0.7")
	if _, err := client.Put(ctx, bad, "not an object"); err != nil {
		t.Fatal(err)
	}
	var keyErr *etcdlayout.KeyError
	if _, err := newStoredView(ctx, client.KV, layout, nil); !errors.As(err, &keyErr) || keyErr.Key != bad {
		t.Errorf("a value that does not decode: %v, want an error naming %s", err, bad)
	}
}

var viewEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// viewService is a ClusterIP Service default/name created at viewEpoch+age
// holding ips.
func viewService(name string, age time.Duration, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(viewEpoch.Add(age))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips},
	}
}

// viewIPAddress is an allocator's IPAddress name for the Service
// default/service.
func viewIPAddress(name, service string) *networkingv1.IPAddress {
	return ipaddress.NewObject(netip.MustParseAddr(name), allocation.Owner{Namespace: "default", Name: service, UID: "uid-" + service})
}

// writeBeforeRead calls write once, before the first read under prefix.
type writeBeforeRead struct {
	clientv3.KV
	prefix string
	write  func()
	once   sync.Once
	wrote  atomic.Bool
}

func (w *writeBeforeRead) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	w.before(key)
	return w.KV.Get(ctx, key, opts...)
}

func (w *writeBeforeRead) GetStream(ctx context.Context, key string, opts ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	w.before(key)
	return w.KV.GetStream(ctx, key, opts...)
}

func (w *writeBeforeRead) before(key string) {
	if strings.HasPrefix(key, w.prefix) {
		w.once.Do(func() { w.write(); w.wrote.Store(true) })
	}
}

// putAll stores objs at their keys as kube-apiserver stores them, many to
// a transaction.
func putAll(t *testing.T, ctx context.Context, client *clientv3.Client, layout etcdlayout.Layout, objs []runtime.Object) {
	t.Helper()
	var ops []clientv3.Op
	flush := func() {
		if _, err := client.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for _, obj := range objs {
		data, err := etcdlayout.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		var key string
		switch o := obj.(type) {
		case *corev1.Service:
			key = layout.Service(o.Namespace, o.Name)
		case *corev1.Namespace:
			key = layout.Namespace(o.Name)
		case *networkingv1.IPAddress:
			key = layout.IPAddress(o.Name)
		case *networkingv1.ServiceCIDR:
			key = layout.ServiceCIDR(o.Name)
		}
		if ops = append(ops, clientv3.OpPut(key, string(data))); len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
}

// TestRunOnceEncryptedAtRest: a one-shot pass given etcd reads it, and one
// that meets an object encrypted at rest there lists through the API
// server instead.
func TestRunOnceEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	layout := etcdlayout.Layout{Prefix: "/registry"}
	cluster := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
	putAll(t, ctx, e.Client(), layout, []runtime.Object{cluster, viewService("stored", 0, "10.0.0.1"), viewIPAddress("10.0.0.1", "stored")})
	api := fake.NewClientset(cluster, viewService("a", 0, "10.0.0.2"), viewService("b", 0, "10.0.0.3"),
		viewIPAddress("10.0.0.2", "a"), viewIPAddress("10.0.0.3", "b"))
	r, err := NewIPAddressRepair(IPAddressConfig{Options: repair.Options{Client: api, DryRun: true,
		Stored: e.Stored(layout)}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil || rep.Services != 1 {
		t.Fatalf("a pass given etcd: %v Services (%v), want etcd's 1", rep, err)
	}
	if _, err := e.Client().Put(ctx, layout.IPAddress("10.0.0.9"), "k8s:enc:aescbc:v1:key1:..."); err != nil {
		t.Fatal(err)
	}
	if rep, err = r.RunOnce(ctx); err != nil || rep.Services != 2 {
		t.Fatalf("with an IPAddress encrypted at rest: %v Services (%v), want the API server's 2", rep, err)
	}
}

// TestStoredViewHandedOff: the IPAddress pass takes the Services a pass
// before it handed off (the node-port pass's read) and reads the rest at
// their revision, so a Service and an IPAddress written after that read are
// not in its view though etcd holds them; a read is taken once; when etcd
// has compacted its revision since, the pass reads everything anew.
func TestStoredViewHandedOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	client := e.Client()
	layout := etcdlayout.Layout{Prefix: "/registry"}
	putAll(t, ctx, client, layout, []runtime.Object{
		&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}},
		viewService("a", 0, "10.0.0.1"), viewIPAddress("10.0.0.1", "a"),
	})
	handoff := &repair.ServicesHandoff{}
	handing := repair.StoredServices{Stored: e.Stored(layout), Handoff: handoff}
	if _, err := handing.Services(ctx); err != nil {
		t.Fatal(err)
	}
	putAll(t, ctx, client, layout, []runtime.Object{viewService("b", 0, "10.0.0.2"), viewIPAddress("10.0.0.2", "b")})
	r, err := NewIPAddressRepair(IPAddressConfig{Options: repair.Options{Client: fake.NewClientset(),
		Stored: e.Stored(layout), Handoff: handoff}})
	if err != nil {
		t.Fatal(err)
	}
	holds := func(v *listView) (services, ips []string) {
		for _, name := range []string{"a", "b"} {
			if svc, _ := v.service("default", name); svc != nil {
				services = append(services, name)
			}
		}
		for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
			if ipa, _ := v.ipAddress(ip); ipa != nil {
				ips = append(ips, ip)
			}
		}
		return services, ips
	}
	check := func(what string, wantServices, wantIPs []string) {
		t.Helper()
		v, err := r.storedView(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		services, ips := holds(v)
		if diff := cmp.Diff([][]string{wantServices, wantIPs}, [][]string{services, ips}); diff != "" {
			t.Errorf("%s: the view's Services and IPAddresses (-want +got):\n%s", what, diff)
		}
	}
	check("handed off", []string{"a"}, []string{"10.0.0.1"})
	check("the next pass", []string{"a", "b"}, []string{"10.0.0.1", "10.0.0.2"})

	if _, err := handing.Services(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Put(ctx, "/registry/unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	check("handed off, its revision compacted", []string{"a", "b"}, []string{"10.0.0.1", "10.0.0.2"})
}
