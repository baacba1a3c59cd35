package rangeusage

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
