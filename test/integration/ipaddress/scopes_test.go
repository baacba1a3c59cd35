package ipaddress_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

func scoped(ns, name string, svcLabels map[string]string) allocation.Owner {
	return allocation.Owner{Namespace: ns, Name: name, Scoped: &allocation.ScopedRequest{Labels: svcLabels}}
}

func createNamespace(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func createScoped(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, annotations map[string]string, cidrs ...string) {
	t.Helper()
	_, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceCIDR %s: %v", name, err)
	}
}

func in(prefix string, ip netip.Addr) bool { return netip.MustParsePrefix(prefix).Contains(ip) }

// TestScopes routes scoped requests over a default unscoped /24 and scoped
// /28s: priorities, the service selector, a full scope with and without
// fallback, static addresses outside the scope, re-marks that ignore scopes,
// and an IPv6 /64 scope.
func TestScopes(t *testing.T) {
	t.Parallel()
	cfg := startServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	client := newClient(t, cfg)
	createNamespace(t, ctx, client, "team-a", map[string]string{"team": "a"})
	createNamespace(t, ctx, client, "team-b", map[string]string{"team": "b"})
	createNamespace(t, ctx, client, "other", nil)
	createScoped(t, ctx, client, "a-low", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}, "10.1.0.0/28")
	createScoped(t, ctx, client, "a-high", map[string]string{scope.NamespaceSelectorAnnotation: "team=a", scope.PriorityAnnotation: "10"}, "10.2.0.0/28", "fd00:a::/64")
	createScoped(t, ctx, client, "b-db", map[string]string{scope.NamespaceSelectorAnnotation: "team in (b)", scope.ServiceSelectorAnnotation: "tier=db",
		scope.FallbackAnnotation: "true"}, "10.3.0.0/28")
	a := newAllocator(t, cfg, false)
	a6 := newAllocator(t, cfg, true)
	poll(t, ctx, "four IPv4 ranges", func() bool { return len(a.Ranges()) == 4 })
	poll(t, ctx, "the IPv6 /64", func() bool { return len(a6.Ranges()) == 1 })

	next := func(al *ipaddress.Allocator, o allocation.Owner) (netip.Addr, error) {
		t.Helper()
		return al.AllocateNext(ctx, o)
	}

	// Services in no scope never take a scoped address.
	for i := range 20 {
		ip, err := next(a, scoped("other", fmt.Sprint("u", i), nil))
		if err != nil || !in("10.0.0.0/24", ip) {
			t.Fatalf("unscoped Service: %s %v, want 10.0.0.0/24", ip, err)
		}
	}
	// team=a: the priority-10 /28 first (14 usable), then the other, then
	// "range is full" naming both, as neither falls back.
	var got []netip.Addr
	for i := range 28 {
		ip, err := next(a, scoped("team-a", fmt.Sprint("a", i), nil))
		if err != nil {
			t.Fatalf("team-a #%d: %v", i, err)
		}
		want := "10.2.0.0/28"
		if i >= 14 {
			want = "10.1.0.0/28"
		}
		if !in(want, ip) || slices.Contains(got, ip) {
			t.Fatalf("team-a #%d got %s, want a new address in %s", i, ip, want)
		}
		got = append(got, ip)
	}
	_, err := next(a, scoped("team-a", "a-full", nil))
	var full *allocation.ScopeFullError
	if !errors.As(err, &full) || !errors.Is(err, allocation.ErrFull) || !slices.Equal(full.ServiceCIDRs, []string{"a-high", "a-low"}) {
		t.Fatalf("full scope: %v, want a ScopeFullError naming a-high and a-low", err)
	}
	// The service selector: only tier=db Services of team b are in b-db.
	if ip, err := next(a, scoped("team-b", "web", map[string]string{"tier": "web"})); err != nil || !in("10.0.0.0/24", ip) {
		t.Fatalf("team-b tier=web: %s %v, want the unscoped range", ip, err)
	}
	for i := range 14 {
		if ip, err := next(a, scoped("team-b", fmt.Sprint("db", i), map[string]string{"tier": "db"})); err != nil || !in("10.3.0.0/28", ip) {
			t.Fatalf("team-b tier=db #%d: %s %v, want 10.3.0.0/28", i, ip, err)
		}
	}
	// b-db falls back: once it is full its Services take unscoped addresses.
	if ip, err := next(a, scoped("team-b", "db-more", map[string]string{"tier": "db"})); err != nil || !in("10.0.0.0/24", ip) {
		t.Fatalf("fallback: %s %v, want the unscoped range", ip, err)
	}

	// Static addresses: only inside a ServiceCIDR the Service may use.
	var oos *allocation.OutOfScopeError
	err = a.Allocate(ctx, netip.MustParseAddr("10.0.0.5"), scoped("team-a", "static", nil))
	if !errors.As(err, &oos) || !slices.Equal(oos.Allowed, []string{"a-high", "a-low"}) {
		t.Fatalf("team-a static in the unscoped range: %v, want an OutOfScopeError allowing a-high, a-low", err)
	}
	err = a.Allocate(ctx, netip.MustParseAddr("10.3.0.1"), scoped("other", "static", nil))
	if !errors.As(err, &oos) || !slices.Equal(oos.Allowed, []string{"kubernetes"}) {
		t.Fatalf("unscoped static in b-db: %v, want an OutOfScopeError allowing kubernetes", err)
	}
	if err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.6"), scoped("team-b", "db-static", map[string]string{"tier": "db"})); err != nil {
		t.Fatalf("a falling-back scope may take an unscoped static address: %v", err)
	}
	if err := a.Allocate(ctx, netip.MustParseAddr("10.9.0.1"), scoped("team-a", "nowhere", nil)); !errors.Is(err, allocation.ErrMismatchedNetwork) {
		t.Fatalf("outside every range: %v, want ErrMismatchedNetwork", err)
	}
	// A re-mark (no Scoped) of an address a stored Service holds is never refused.
	if err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.7"), allocation.Owner{Namespace: "team-a", Name: "old"}); err != nil {
		t.Fatalf("re-mark outside the scope: %v", err)
	}
	// The dry run answers the same.
	if err := a.DryRun().Allocate(ctx, netip.MustParseAddr("10.0.0.8"), scoped("team-a", "dry", nil)); !errors.As(err, &oos) {
		t.Fatalf("dry-run static outside the scope: %v", err)
	}
	if _, err := a.DryRun().AllocateNext(ctx, scoped("team-a", "dry", nil)); !errors.As(err, &full) {
		t.Fatalf("dry-run next in a full scope: %v", err)
	}

	// IPv6: a-high's /64 is team a's; no unscoped IPv6 range exists.
	for i := range 50 {
		if ip, err := next(a6, scoped("team-a", fmt.Sprint("v6-", i), nil)); err != nil || !in("fd00:a::/64", ip) {
			t.Fatalf("team-a IPv6: %s %v", ip, err)
		}
	}
	_, err = next(a6, scoped("other", "v6", nil))
	var none *ipaddress.NoServiceCIDRError
	if !errors.As(err, &none) || !slices.Equal(none.ScopedElsewhere, []string{"a-high"}) {
		t.Fatalf("IPv6 for a Service in no scope: %v, want a NoServiceCIDRError naming a-high", err)
	}

	// Relabelling a namespace routes its next Services; it moves nothing.
	ns, err := client.CoreV1().Namespaces().Get(ctx, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["team"] = "b"
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the relabelled namespace to route to b-db's fallback", func() bool {
		err := a.DryRun().Allocate(ctx, netip.MustParseAddr("10.3.0.1"), scoped("other", "db", map[string]string{"tier": "db"}))
		return errors.Is(err, allocation.ErrAllocated) // in scope now, and taken
	})

	// A namespace the cache has not seen yet is read live.
	createNamespace(t, ctx, client, "fresh", map[string]string{"team": "a"})
	if err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.9"), scoped("fresh", "s", nil)); !errors.As(err, &oos) {
		t.Fatalf("fresh team-a namespace, static outside its scope: %v", err)
	}

	// Every IPAddress is distinct and owned as requested.
	list, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{}
	for _, o := range list.Items {
		owners[o.Name] = o.Spec.ParentRef.Namespace + "/" + o.Spec.ParentRef.Name
	}
	for _, ip := range got {
		if !in("10.1.0.0/28", ip) && !in("10.2.0.0/28", ip) {
			t.Errorf("team-a holds %s outside its scope", ip)
		}
		if o := owners[ip.String()]; !strings.HasPrefix(o, "team-a/") {
			t.Errorf("%s owned by %q, want a Service of team-a", ip, o)
		}
	}
}
