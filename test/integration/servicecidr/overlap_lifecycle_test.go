package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// TestDrainingWinsOverAnOpenOverlap: a draining ServiceCIDR inside an open
// one drains: no dynamic pick and no new user-chosen address lands in it,
// the open one hands out the rest of its addresses, the draining one's
// create warns of the overlap, and both conditions say so.
func TestDrainingWinsOverAnOpenOverlap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	c, seen := warningClient(t, srv)
	// The default range takes no dynamic pick: picks come from "wide".
	if _, err := annotate(ctx, c, "kubernetes", lifecycle.ManualOnlyAnnotation, ptr("true")); err != nil {
		t.Fatal(err)
	}
	if _, err := createServiceCIDR(ctx, c, "wide", []string{"10.5.0.0/26"}); err != nil {
		t.Fatal(err)
	}
	seen.take()
	if _, err := createServiceCIDR(ctx, c, "old2", []string{"10.5.0.0/27"}, lifecycle.DrainingAnnotation, "true"); err != nil {
		t.Fatal(err)
	}
	want := `ServiceCIDR "old2" is draining, and 10.5.0.0/27 lies inside ServiceCIDR "wide" (10.5.0.0/26): no new allocation lands in 10.5.0.0/27 while it is, ` +
		`from either ServiceCIDR (where ServiceCIDRs overlap, the most closed lifecycle wins)`
	if w := seen.take(); len(w) != 1 || w[0] != want {
		t.Errorf("warnings %q, want [%q]", w, want)
	}
	poll(ctx, t, 30*time.Second, "the allocator to apply the drain", func() (bool, error) {
		return refusesAsDraining(ctx, c, "10.5.0.9"), nil
	})

	old2 := netip.MustParsePrefix("10.5.0.0/27")
	for i := range 25 { // of the 31 addresses of wide outside old2
		svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(fmt.Sprintf("d%d", i), ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ip := netip.MustParseAddr(svc.Spec.ClusterIP); old2.Contains(ip) || !netip.MustParsePrefix("10.5.0.0/26").Contains(ip) {
			t.Fatalf("Service d%d got %s: inside draining old2, or outside wide", i, ip)
		}
	}
	_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("chosen", "10.5.0.9"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `10.5.0.9 is in ServiceCIDR "old2", which is draining and takes no new allocation`) {
		t.Errorf("a user-chosen address inside old2: %v, want 422 naming old2", err)
	}

	waitCondition(ctx, t, c, "old2", servicecidr.ConditionDraining, servicecidr.ReasonDrained,
		"takes no new allocation; no Service holds an address in it, it can be deleted")
	waitCondition(ctx, t, c, "wide", servicecidr.ConditionDraining, servicecidr.ReasonPartlyDraining,
		`takes new allocations, but none inside draining ServiceCIDR "old2" (10.5.0.0/27): where ServiceCIDRs overlap, the most closed lifecycle wins`)
}

// TestDeletedServiceCIDRSaysSo: a ServiceCIDR deleted while a Service holds
// an address in it says it is being deleted and takes no new allocation:
// in its Draining condition, and in a warning beside the 422 of a request
// for one of its addresses, whose text stays kube-apiserver's.
func TestDeletedServiceCIDRSaysSo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	c, seen := warningClient(t, srv)
	if _, err := createServiceCIDR(ctx, c, "old", []string{"10.6.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "a Service in old", func() (bool, error) {
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("holder", "10.6.0.5"), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const upstream = "failed to allocate IP 10.6.0.7: the provided network does not match the current range"
	const want = `spec.clusterIPs: 10.6.0.7 is in ServiceCIDR "old", which is being deleted and takes no new allocation; ` +
		`choose an address of another ServiceCIDR, or leave spec.clusterIP empty`
	poll(ctx, t, 30*time.Second, "the request's warning to name the deletion", func() (bool, error) {
		seen.take()
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("late", "10.6.0.7"), metav1.CreateOptions{})
		if err == nil { // the server had not seen the deletion yet
			return false, c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, "late", metav1.DeleteOptions{})
		}
		w := seen.take()
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), upstream) && len(w) == 1 && w[0] == want,
			fmt.Errorf("%v, warnings %q", err, w)
	})
	waitCondition(ctx, t, c, "old", servicecidr.ConditionDraining, servicecidr.ReasonDeleting,
		"being deleted: takes no new allocation; 1 Service still holds an address in it")
}

// TestDefaultGuardrailsAndSelectorBounds: without guardrail flags, a
// ServiceCIDR wider than /8 (IPv4) or /64 (IPv6) is refused naming the
// flag that allows it, the widest ones within them are accepted, and so
// is the default ServiceCIDR; a scope selector beyond its bounds is
// refused.
func TestDefaultGuardrailsAndSelectorBounds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/12,fd00:10:96::/108", Model: "ipaddress"})
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Fatalf("the default ServiceCIDR: %v", err)
	}
	cases := []struct {
		name  string
		cidrs []string
		kv    []string
		field string // "" accepted
		want  string
	}{
		{name: "everything", cidrs: []string{"0.0.0.0/0"}, field: "spec.cidrs[0]",
			want: "prefix length /0 is shorter than the shortest allowed, /8 (--service-cidr-min-prefix-length-ipv4)"},
		{name: "wider-than-8", cidrs: []string{"10.0.0.0/7"}, field: "spec.cidrs[0]", want: "(--service-cidr-min-prefix-length-ipv4)"},
		{name: "v6-wider-than-64", cidrs: []string{"10.50.0.0/24", "fd01::/48"}, field: "spec.cidrs[1]",
			want: "prefix length /48 is shorter than the shortest allowed, /64 (--service-cidr-min-prefix-length-ipv6)"},
		{name: "widest-allowed", cidrs: []string{"11.0.0.0/8", "fd02::/64"}},
		{name: "selector-too-long", cidrs: []string{"10.51.0.0/24"},
			kv:    []string{scope.NamespaceSelectorAnnotation, "team in (" + strings.Repeat("a,", 3000) + "b)"},
			field: "metadata.annotations[scope.allocator.github.io/namespace-selector]", want: "a scope selector may be at most 4096 bytes"},
		{name: "selector-too-many-terms", cidrs: []string{"10.52.0.0/24"},
			kv:    []string{scope.NamespaceSelectorAnnotation, strings.Repeat("a=b,", 32) + "c=d"},
			field: "metadata.annotations[scope.allocator.github.io/namespace-selector]", want: "a scope selector may have at most 32 requirements"},
	}
	for _, tc := range cases {
		_, err := createServiceCIDR(ctx, srv.Client, tc.name, tc.cidrs, tc.kv...)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %v: %v", tc.name, tc.cidrs, err)
			}
			continue
		}
		checkFieldError(t, tc.name, err, tc.field, tc.want)
	}
}
