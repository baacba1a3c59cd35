package rangeusage

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestFromIPAddressesHolders: an IPAddress is a Service's, and counts for
// its namespace, only when its parentRef is a core Service
// (ipaddress.ParentIsService); any other parent, or none, leaves the address
// used but held by no namespace.
func TestFromIPAddressesHolders(t *testing.T) {
	t.Parallel()
	ipa := func(name string, ref *networkingv1.ParentReference) *networkingv1.IPAddress {
		return &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IPAddressSpec{ParentRef: ref}}
	}
	client := fake.NewClientset(
		&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}},
		ipa("10.0.0.1", &networkingv1.ParentReference{Resource: "services", Namespace: "web", Name: "a"}),
		ipa("10.0.0.2", &networkingv1.ParentReference{Resource: "services", Namespace: "web", Name: "b"}),
		ipa("10.0.0.3", &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "edge", Name: "gw"}),
		ipa("10.0.0.4", &networkingv1.ParentReference{Group: "example.com", Resource: "services", Namespace: "edge", Name: "svc"}),
		ipa("10.0.0.5", nil),
	)
	usage, err := FromIPAddresses(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(usage.CIDRs) != 1 {
		t.Fatalf("CIDRs: %+v, want one", usage.CIDRs)
	}
	got := usage.CIDRs[0]
	want := []NamespaceCount{{Namespace: NoNamespace, Used: 3}, {Namespace: "web", Used: 2}}
	if diff := cmp.Diff(want, got.Namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	if got.Total().Used != 5 || got.Services != 2 {
		t.Errorf("used %d, Services %d; want 5 and 2", got.Total().Used, got.Services)
	}
}

// TestFromServicesCountsHeldAddresses: without the bitmap, the addresses
// the Services hold are counted on the ranges given, an address outside
// them as outside, and the Usage says it was counted from the Services.
func TestFromServicesCountsHeldAddresses(t *testing.T) {
	t.Parallel()
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
	}
	client := fake.NewClientset(svc("web", "a", "10.0.0.5"), svc("web", "b", "10.0.0.200"), svc("edge", "c", "10.1.0.1"),
		svc("edge", "headless", corev1.ClusterIPNone))
	ranges := []Range{{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Source: "ServiceCIDR/kubernetes", Ready: true}}
	usage, err := FromServices(context.Background(), client, model.Bitmap, ranges)
	if err != nil {
		t.Fatal(err)
	}
	got := usage.CIDRs[0]
	if got.Static.Used != 1 || got.Dynamic.Used != 1 || usage.Families[0].Outside != 1 || usage.CountedFrom != SourceServices {
		t.Errorf("static %d, dynamic %d, outside %d, counted from %q; want 1, 1, 1, %q",
			got.Static.Used, got.Dynamic.Used, usage.Families[0].Outside, usage.CountedFrom, SourceServices)
	}
	if diff := cmp.Diff([]NamespaceCount{{Namespace: "web", Used: 2}}, got.Namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
}

// TestListPages: the Services and IPAddresses are read in the repairs'
// pages (report.ListPageSize, then report.NextPageSize of what the first
// page says remains), not in pages of 500 each of which costs the server a
// walk of every key after it.
func TestListPages(t *testing.T) {
	t.Parallel()
	remaining := int64(400_000)
	pager := func(limits *[]int64, list func(cont string) runtime.Object) k8stesting.ReactionFunc {
		return func(action k8stesting.Action) (bool, runtime.Object, error) {
			opts := action.(k8stesting.ListActionImpl).ListOptions
			*limits = append(*limits, opts.Limit)
			return true, list(opts.Continue), nil
		}
	}
	var svcLimits, ipLimits []int64
	client := fake.NewClientset()
	client.PrependReactor("list", "services", pager(&svcLimits, func(cont string) runtime.Object {
		if cont == "" {
			return &corev1.ServiceList{ListMeta: metav1.ListMeta{Continue: "next", RemainingItemCount: &remaining}}
		}
		return &corev1.ServiceList{}
	}))
	client.PrependReactor("list", "ipaddresses", pager(&ipLimits, func(cont string) runtime.Object {
		if cont == "" {
			return &networkingv1.IPAddressList{ListMeta: metav1.ListMeta{Continue: "next", RemainingItemCount: &remaining}}
		}
		return &networkingv1.IPAddressList{}
	}))
	ctx := context.Background()
	if err := eachService(ctx, client, func(*corev1.Service) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := FromIPAddresses(ctx, client); err != nil {
		t.Fatal(err)
	}
	want := []int64{report.ListPageSize, report.NextPageSize(&remaining)}
	if !slices.Equal(svcLimits, want) || !slices.Equal(ipLimits, want) {
		t.Errorf("page limits: Services %v, IPAddresses %v; want %v", svcLimits, ipLimits, want)
	}
}
