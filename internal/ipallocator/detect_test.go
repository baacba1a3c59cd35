package ipallocator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// The API a job may meet: one serving ServiceCIDRs (kube-apiserver ≥ 1.33,
// ours), one serving networking.k8s.io/v1 without them (kube-apiserver ≤
// 1.32), one serving no networking.k8s.io/v1 at all.
var (
	apiWithServiceCIDRs = []*metav1.APIResourceList{{GroupVersion: "networking.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "ingresses"}, {Name: "ipaddresses"}, {Name: "servicecidrs"}}}}
	apiWithoutServiceCIDRs = []*metav1.APIResourceList{{GroupVersion: "networking.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "ingresses"}, {Name: "networkpolicies"}}}}
	apiWithoutNetworkingV1 = []*metav1.APIResourceList{}
)

// TestDetect runs on a real etcd, each case under a prefix of its own, with
// real transition records (transition.Join, Finish) and a fake API's
// discovery: auto follows the table of Detect's doc, and a named model is
// kept as given.
func TestDetect(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t).Client()
	const (
		none       = ""
		primary    = "primary"
		secondary  = "secondary"
		joinBitmap = "bitmap replica"
		joinIP     = "ipaddress replica"
		joinLeft   = "ipaddress replica that left"
		finished   = "ipaddress replica, transition finished"
	)
	for i, tc := range []struct {
		name     string
		named    model.Name // the model asked for; Auto when empty
		noEtcd   bool
		stored   string // which ClusterIP map is stored
		replicas string // the transition history
		api      []*metav1.APIResourceList
		marked   string // AnnotationModel on the ServiceCIDR "kubernetes"; no ServiceCIDR when empty
		want     model.Name
		reason   string // a fragment of the reason
	}{
		{name: "named model kept", named: model.Bitmap, noEtcd: true, want: model.Bitmap},
		{name: "no etcd", noEtcd: true, want: model.IPAddress, reason: "no etcd was given"},
		{name: "no etcd, kube-apiserver 1.32", noEtcd: true, api: apiWithoutServiceCIDRs, want: model.Bitmap, reason: "serves no networking.k8s.io/v1 ServiceCIDRs"},
		{name: "no etcd, no networking.k8s.io/v1", noEtcd: true, api: apiWithoutNetworkingV1, want: model.Bitmap, reason: "kube-apiserver 1.32 or earlier"},
		{name: "no etcd, kube-apiserver 1.33", noEtcd: true, api: apiWithServiceCIDRs, want: model.IPAddress, reason: "no allocator serve naming another model"},
		{name: "no etcd, a bitmap-model server", noEtcd: true, api: apiWithServiceCIDRs, marked: "bitmap", want: model.Bitmap, reason: "annotation " + ipallocator.AnnotationModel},
		{name: "no etcd, an IPAddress-model server", noEtcd: true, api: apiWithServiceCIDRs, marked: "ipaddress", want: model.IPAddress, reason: "allocates in the ipaddress model"},
		{name: "etcd wins over the annotation", stored: primary, replicas: joinIP, api: apiWithServiceCIDRs, marked: "bitmap", want: model.IPAddress, reason: "every live replica runs the IPAddress model"},
		{name: "no map", stored: none, want: model.IPAddress, reason: "no ClusterIP RangeAllocation"},
		{name: "no map, IPAddress replica", stored: none, replicas: joinIP, want: model.IPAddress, reason: "no ClusterIP RangeAllocation"},
		{name: "secondary map, nothing else to ask", stored: secondary, want: model.Bitmap, reason: "kube-apiserver 1.32 or earlier"},
		{name: "map, bitmap replica live", stored: primary, replicas: joinBitmap, api: apiWithServiceCIDRs, want: model.Bitmap, reason: "bitmap-model replicas are live"},
		{name: "map, IPAddress replica dual-writing", stored: primary, replicas: joinIP, want: model.IPAddress, reason: "every live replica runs the IPAddress model"},
		{name: "map, transition finished", stored: primary, replicas: finished, want: model.IPAddress, reason: "the bitmap is retired"},
		{name: "map, dual write on, no replica live, API serves ServiceCIDRs", stored: primary, replicas: joinLeft, api: apiWithServiceCIDRs, want: model.IPAddress, reason: "serves networking.k8s.io/v1 ServiceCIDRs"},
		{name: "map, no state, kube-apiserver 1.33", stored: primary, api: apiWithServiceCIDRs, want: model.IPAddress, reason: "left from the bitmap model"},
		{name: "map, no state, kube-apiserver 1.32", stored: primary, api: apiWithoutServiceCIDRs, want: model.Bitmap, reason: "kube-apiserver 1.32 or earlier"},
		{name: "map, no state, no networking.k8s.io/v1", stored: primary, api: apiWithoutNetworkingV1, want: model.Bitmap, reason: "kube-apiserver 1.32 or earlier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			prefix := fmt.Sprintf("/detect-%d", i)
			l := etcdlayout.Layout{Prefix: prefix}
			switch tc.stored {
			case primary:
				put(t, etcd, l.PrimaryServiceIPRange())
			case secondary:
				put(t, etcd, l.SecondaryServiceIPRange())
			}
			switch tc.replicas {
			case joinBitmap:
				join(t, etcd, prefix, model.Bitmap)
			case joinIP:
				join(t, etcd, prefix, model.IPAddress)
			case joinLeft:
				if err := join(t, etcd, prefix, model.IPAddress).Close(ctx); err != nil {
					t.Fatal(err)
				}
			case finished:
				join(t, etcd, prefix, model.IPAddress)
				if _, err := transition.Finish(ctx, etcd, prefix, transition.FinishOptions{By: "test"}); err != nil {
					t.Fatal(err)
				}
			}
			var client kubernetes.Interface
			if tc.api != nil {
				c := fake.NewClientset()
				if tc.marked != "" {
					c = fake.NewClientset(defaultServiceCIDR(tc.marked))
				}
				c.Resources = tc.api
				client = c
			}
			kv := etcd
			if tc.noEtcd {
				kv = nil
			}
			named := tc.named
			if named == "" {
				named = model.Auto
			}
			got, err := ipallocator.Detect(ctx, named, kv, prefix, client)
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != tc.want || !strings.Contains(got.Reason, tc.reason) || got.Detected() != (named == model.Auto) {
				t.Errorf("Detect = %+v, want the %s model, a reason with %q", got, tc.want, tc.reason)
			}
		})
	}
}

// TestDetectThroughAPIBadAnnotation: a model annotation that names no
// model is an error naming it, never a guess.
func TestDetectThroughAPIBadAnnotation(t *testing.T) {
	t.Parallel()
	c := fake.NewClientset(defaultServiceCIDR("bitmaps"))
	c.Resources = apiWithServiceCIDRs
	_, err := ipallocator.Detect(context.Background(), model.Auto, nil, "/registry", c)
	if err == nil || !strings.Contains(err.Error(), ipallocator.AnnotationModel) || !strings.Contains(err.Error(), `"bitmaps"`) {
		t.Errorf("Detect = %v, want an error naming the annotation and its value", err)
	}
}

// defaultServiceCIDR is the ServiceCIDR "kubernetes" as allocator serve
// annotates it with model.
func defaultServiceCIDR(model string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Annotations: map[string]string{ipallocator.AnnotationModel: model}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
}

func put(t *testing.T, etcd *clientv3.Client, key string) {
	t.Helper()
	if _, err := etcd.Put(context.Background(), key, "x"); err != nil {
		t.Fatal(err)
	}
	if found, err := clusterip.IPMapExists(context.Background(), etcd, etcdlayout.Layout{Prefix: strings.SplitN(key, "/ranges/", 2)[0]}); err != nil || !found {
		t.Fatalf("map %s not found: %v, %v", key, found, err)
	}
}

// join registers a replica of m under prefix, as a server does at start,
// until the test ends.
func join(t *testing.T, etcd *clientv3.Client, prefix string, m model.Name) *transition.Coordinator {
	t.Helper()
	c, err := transition.Join(context.Background(), transition.Config{Client: etcd, Prefix: prefix, Model: m, ID: string(m) + "-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
