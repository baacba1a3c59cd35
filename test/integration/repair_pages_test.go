package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestRepairPagesWalk: the real server's protobuf pages are what the walk
// reads; the repairs' pages of Services and IPAddresses, read from it and
// walked for what the repairs keep, hold what client-go's typed lists hold
// once made slim, page for page
// (Services of every type, dual-stack, with node ports, labels and
// managedFields; the continue token and remaining count of each page).
func TestRepairPagesWalk(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := startServer(t, serverOptions{model: "ipaddress", serviceRange: "10.0.0.0/24,fd00::/112"})
	labelled := func(s *corev1.Service) { s.Labels = map[string]string{"team": "a", "tier": "web"} }
	mustCreate(t, ctx, srv.client, newService("plain", labelled))
	mustCreate(t, ctx, srv.client, newService("dual", withPolicy(corev1.IPFamilyPolicyRequireDualStack)))
	mustCreate(t, ctx, srv.client, newService("v6", withFamilies(corev1.IPv6Protocol)))
	mustCreate(t, ctx, srv.client, newService("nodeport", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
		s.Spec.Ports[0].Name = "http"
	}))
	mustCreate(t, ctx, srv.client, newService("lb", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	mustCreate(t, ctx, srv.client, newService("headless", withIP(corev1.ClusterIPNone)))
	mustCreate(t, ctx, srv.client, newService("external", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName, s.Spec.Ports, s.Spec.Selector = corev1.ServiceTypeExternalName, "example.com", nil, nil
	}))
	for i := range 5 {
		mustCreate(t, ctx, srv.client, newService(fmt.Sprintf("more-%d", i)))
	}

	// The server's pages are what the walk reads, not what it leaves to the
	// full decode.
	for resource, walk := range map[string]func([]byte) bool{
		"services":    func(b []byte) bool { _, _, ok := slim.DecodeServiceList(b); return ok },
		"ipaddresses": func(b []byte) bool { _, _, ok := slim.DecodeIPAddressList(b); return ok },
	} {
		rc := srv.client.CoreV1().RESTClient()
		if resource == "ipaddresses" {
			rc = srv.client.NetworkingV1().RESTClient()
		}
		raw, err := rc.Get().Resource(resource).Param("limit", "4").
			SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !walk(raw) {
			t.Errorf("a page of %s from the server: the walk does not read it", resource)
		}
	}

	services := report.ServicePages(srv.client)
	comparePages(t, ctx, "services", services.Page, func(ctx context.Context, opts metav1.ListOptions) ([]*corev1.Service, metav1.ListMeta, error) {
		list, err := srv.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, metav1.ListMeta{}, err
		}
		var items []*corev1.Service
		for i := range list.Items {
			items = append(items, slim.Service(&list.Items[i]))
		}
		return items, list.ListMeta, nil
	})
	ipAddresses := report.IPAddressPages(srv.client)
	comparePages(t, ctx, "ipaddresses", ipAddresses.Page, func(ctx context.Context, opts metav1.ListOptions) ([]*networkingv1.IPAddress, metav1.ListMeta, error) {
		list, err := srv.client.NetworkingV1().IPAddresses().List(ctx, opts)
		if err != nil {
			return nil, metav1.ListMeta{}, err
		}
		var items []*networkingv1.IPAddress
		for i := range list.Items {
			items = append(items, slim.IPAddress(&list.Items[i]))
		}
		return items, list.ListMeta, nil
	})
}

// comparePages reads a list in pages of 4, one page through got and the
// same page through want in turn, and fails on the first that differs.
func comparePages[T any](t *testing.T, ctx context.Context, what string,
	got, want func(context.Context, metav1.ListOptions) ([]T, metav1.ListMeta, error),
) {
	t.Helper()
	opts := metav1.ListOptions{Limit: 4}
	total := 0
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatalf("%s: more than 10 pages of 4", what)
		}
		gotItems, gotMeta, err := got(ctx, opts)
		if err != nil {
			t.Fatalf("%s page %d: %v", what, page, err)
		}
		wantItems, wantMeta, err := want(ctx, opts)
		if err != nil {
			t.Fatalf("%s page %d, typed: %v", what, page, err)
		}
		// The continue token names the page's revision and its last key:
		// both reads of one page give the same.
		if diff := cmp.Diff(wantItems, gotItems); diff != "" {
			t.Fatalf("%s page %d (-typed +walked):\n%s", what, page, diff)
		}
		if diff := cmp.Diff(wantMeta, gotMeta); diff != "" {
			t.Fatalf("%s page %d metadata (-typed +walked):\n%s", what, page, diff)
		}
		total += len(gotItems)
		if gotMeta.Continue == "" {
			break
		}
		opts.Continue = gotMeta.Continue
	}
	if total < 12 {
		t.Errorf("%s: %d objects in the pages, want at least 12", what, total)
	}
}
