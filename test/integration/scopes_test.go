package integration

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// Scoped ServiceCIDRs (design.md §11) through the real server:
// every request goes over HTTPS to our API server on a real etcd, the way a
// client of kube-apiserver would send it.

func scopeServer(t *testing.T, serviceRange string) kubernetes.Interface {
	t.Helper()
	return startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: serviceRange}).client
}

func mustCreateNamespace(t *testing.T, ctx context.Context, c kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// scopeAnnotations builds the scope annotations from pairs of short keys
// ("ns", "svc", "priority", "fallback") and values.
func scopeAnnotations(kv ...string) map[string]string {
	keys := map[string]string{"ns": scope.NamespaceSelectorAnnotation, "svc": scope.ServiceSelectorAnnotation,
		"priority": scope.PriorityAnnotation, "fallback": scope.FallbackAnnotation}
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[keys[kv[i]]] = kv[i+1]
	}
	return out
}

func newServiceCIDR(name string, annotations map[string]string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
}

// mustCreateScoped creates a ServiceCIDR and waits until it is ready.
func mustCreateScoped(t *testing.T, ctx context.Context, c kubernetes.Interface, name string, annotations map[string]string, cidrs ...string) {
	t.Helper()
	if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, newServiceCIDR(name, annotations, cidrs...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceCIDR %s: %v", name, err)
	}
	waitReadyCIDR(t, c, name)
}

// waitRouted waits until the allocator routes a new Service of namespace ns
// (built by newService with mutate) into prefix, probing with server-side
// dry-run creates, which allocate nothing. The Ready condition alone does
// not say that the allocator's own informer has the ServiceCIDR yet.
func waitRouted(t *testing.T, c kubernetes.Interface, ns string, prefix netip.Prefix, mutate ...func(*corev1.Service)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		svc, err := c.CoreV1().Services(ns).Create(ctx, newService("probe", mutate...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		last = fmt.Sprint("got ", svc.Spec.ClusterIPs)
		return slices.ContainsFunc(svc.Spec.ClusterIPs, func(ip string) bool {
			a, err := netip.ParseAddr(ip)
			return err == nil && prefix.Contains(a)
		}), nil
	})
	if err != nil {
		t.Fatalf("a new Service of %s not routed into %s within 30s (last probe: %s)", ns, prefix, last)
	}
}

func createIn(ctx context.Context, c kubernetes.Interface, ns string, svc *corev1.Service) (*corev1.Service, error) {
	return c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
}

// expectIn checks that every address of svc lies in one of prefixes.
func expectIn(t *testing.T, svc *corev1.Service, prefixes ...string) {
	t.Helper()
	for _, ip := range svc.Spec.ClusterIPs {
		expectAddrIn(t, svc, ip, prefixes...)
	}
}

// expectAddrIn checks that ip, an address of svc, lies in one of prefixes.
func expectAddrIn(t *testing.T, svc *corev1.Service, ip string, prefixes ...string) {
	t.Helper()
	addr := netip.MustParseAddr(ip)
	if !slices.ContainsFunc(prefixes, func(p string) bool { return netip.MustParsePrefix(p).Contains(addr) }) {
		t.Errorf("%s/%s got %s, want an address in %v", svc.Namespace, svc.Name, ip, prefixes)
	}
}

// expectIPAddressOf checks that the IPAddress named ip references the
// Service ns/name.
func expectIPAddressOf(t *testing.T, ctx context.Context, c kubernetes.Interface, ip, ns, name string) {
	t.Helper()
	obj, err := c.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("IPAddress %s of %s/%s: %v", ip, ns, name, err)
	}
	want := networkingv1.ParentReference{Group: "", Resource: "services", Namespace: ns, Name: name}
	if obj.Spec.ParentRef == nil || *obj.Spec.ParentRef != want {
		t.Errorf("IPAddress %s parentRef %+v, want %+v", ip, obj.Spec.ParentRef, want)
	}
}

// TestScopesConcurrentCreates: Services of three namespaces (two in scopes,
// one in none) are created at once by 24 clients. Each gets an address its
// scope allows, no address is handed out twice, and the IPAddress of each
// address references its Service, with no other IPAddress left behind.
func TestScopesConcurrentCreates(t *testing.T) {
	t.Parallel()
	c := scopeServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	allowed := map[string]string{"team-a": "10.1.0.0/26", "team-b": "10.2.0.0/26", "plain": "10.0.0.0/24"}
	mustCreateNamespace(t, ctx, c, "team-a", map[string]string{"team": "a"})
	mustCreateNamespace(t, ctx, c, "team-b", map[string]string{"team": "b"})
	mustCreateNamespace(t, ctx, c, "plain", nil)
	mustCreateScoped(t, ctx, c, "scope-a", scopeAnnotations("ns", "team=a"), allowed["team-a"])
	mustCreateScoped(t, ctx, c, "scope-b", scopeAnnotations("ns", "team in (b,c)"), allowed["team-b"])
	waitRouted(t, c, "team-a", netip.MustParsePrefix(allowed["team-a"]))
	waitRouted(t, c, "team-b", netip.MustParsePrefix(allowed["team-b"]))

	const workersPerNamespace, perWorker = 8, 3
	createCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards created and errs
		created []*corev1.Service
		errs    []error
	)
	for ns := range allowed {
		for w := range workersPerNamespace {
			wg.Go(func() {
				for i := range perWorker {
					svc, err := createIn(createCtx, c, ns, newService(fmt.Sprintf("s-%d-%d", w, i)))
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s/s-%d-%d: %w", ns, w, i, err))
					} else {
						created = append(created, svc)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("create: %v", err)
	}
	if want := len(allowed) * workersPerNamespace * perWorker; len(created) != want {
		t.Fatalf("%d Services created, want %d", len(created), want)
	}

	holder := map[string]string{"10.0.0.1": "default/kubernetes"}
	for _, svc := range created {
		expectIn(t, svc, allowed[svc.Namespace])
		key := svc.Namespace + "/" + svc.Name
		if other, dup := holder[svc.Spec.ClusterIP]; dup {
			t.Errorf("%s handed out twice: %s and %s", svc.Spec.ClusterIP, other, key)
		}
		holder[svc.Spec.ClusterIP] = key
	}
	list, err := c.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ipa := range list.Items {
		ref := ipa.Spec.ParentRef
		if ref == nil || ref.Resource != "services" || holder[ipa.Name] != ref.Namespace+"/"+ref.Name {
			t.Errorf("IPAddress %s references %+v, want the Service %q", ipa.Name, ref, holder[ipa.Name])
		}
		seen[ipa.Name] = true
	}
	for ip, svc := range holder {
		if !seen[ip] {
			t.Errorf("%s of %s has no IPAddress", ip, svc)
		}
	}
}

// TestScopesFullFallbackPriority: a full scope without fallback answers
// "range is full" naming its ServiceCIDRs; one with fallback continues in
// the default ServiceCIDR; a Service in two scopes falls back only when
// both say so; a higher priority ServiceCIDR is used before a lower one,
// whatever their creation order; a service selector matches the Service's
// labels; a static address outside what the Service's scope allows is
// refused with 422 naming what it may use.
func TestScopesFullFallbackPriority(t *testing.T) {
	t.Parallel()
	c := scopeServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	for ns, team := range map[string]string{"team-a": "a", "team-b": "b", "team-c": "c"} {
		mustCreateNamespace(t, ctx, c, ns, map[string]string{"team": team})
	}
	mustCreateNamespace(t, ctx, c, "team-d", map[string]string{"team": "d", "tier": "gold"})
	mustCreateNamespace(t, ctx, c, "gold", map[string]string{"tier": "gold"})
	mustCreateNamespace(t, ctx, c, "plain", nil)
	// A /29 has six usable addresses.
	mustCreateScoped(t, ctx, c, "strict", scopeAnnotations("ns", "team=a"), "10.1.0.0/29")
	mustCreateScoped(t, ctx, c, "loose", scopeAnnotations("ns", "team=b", "fallback", "true"), "10.2.0.0/29")
	// team-d is in both: d-loose falls back, d-strict does not.
	mustCreateScoped(t, ctx, c, "d-loose", scopeAnnotations("ns", "team=d", "fallback", "true"), "10.5.0.0/30")
	mustCreateScoped(t, ctx, c, "d-strict", scopeAnnotations("ns", "tier=gold", "fallback", "false"), "10.6.0.0/30")
	waitRouted(t, c, "team-a", netip.MustParsePrefix("10.1.0.0/29"))
	waitRouted(t, c, "team-b", netip.MustParsePrefix("10.2.0.0/29"))
	waitRouted(t, c, "team-d", netip.MustParsePrefix("10.5.0.0/30"))
	waitRouted(t, c, "gold", netip.MustParsePrefix("10.6.0.0/30"))

	// fill creates Services in ns until the first error (at most limit) and
	// returns them with the error.
	fill := func(ns string, limit int) ([]*corev1.Service, error) {
		t.Helper()
		var out []*corev1.Service
		for i := range limit {
			svc, err := createIn(ctx, c, ns, newService(fmt.Sprintf("fill-%02d", i)))
			if err != nil {
				return out, err
			}
			out = append(out, svc)
		}
		return out, nil
	}

	t.Run("static", func(t *testing.T) {
		// Inside the scope: accepted; outside it, in a served ServiceCIDR: 422.
		svc, err := createIn(ctx, c, "team-a", newService("static-in", withIP("10.1.0.6")))
		if err != nil {
			t.Fatalf("static address inside the scope: %v", err)
		}
		expectIPAddressOf(t, ctx, c, "10.1.0.6", "team-a", svc.Name)
		mustDeleteIn(t, ctx, c, "team-a", svc.Name)
		for _, tc := range []struct{ ns, ip, allowed string }{
			{"team-a", "10.0.0.50", `"strict"`},
			{"team-a", "10.2.0.3", `"strict"`},
			{"team-b", "10.1.0.3", `"kubernetes", "loose"`},
			{"team-d", "10.0.0.50", `"d-loose", "d-strict"`},
			{"plain", "10.1.0.3", `"kubernetes"`},
		} {
			_, err := createIn(ctx, c, tc.ns, newService("static-out", withIP(tc.ip)))
			expectStatus(t, err, 422, fmt.Sprintf(`spec.clusterIPs: Invalid value: ["%s"]: failed to allocate IP %s: %s is in a ServiceCIDR scoped to other Services; this Service may use ServiceCIDR %s`,
				tc.ip, tc.ip, tc.ip, tc.allowed))
			if _, err := c.NetworkingV1().IPAddresses().Get(ctx, tc.ip, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("refused %s of %s left an IPAddress (%v)", tc.ip, tc.ns, err)
			}
		}
		// Outside every ServiceCIDR stays upstream's error.
		_, err = createIn(ctx, c, "team-a", newService("static-nowhere", withIP("10.9.0.1")))
		expectStatus(t, err, 422, "failed to allocate IP 10.9.0.1: the provided network does not match the current range")
	})

	t.Run("full without fallback", func(t *testing.T) {
		svcs, err := fill("team-a", 20)
		if len(svcs) != 6 {
			t.Fatalf("team-a took %d addresses before %v, want 6", len(svcs), err)
		}
		for _, svc := range svcs {
			expectIn(t, svc, "10.1.0.0/29")
		}
		expectStatus(t, err, 500, `failed to allocate a serviceIP: range is full: ServiceCIDR "strict" of this Service's scope (no fallback to unscoped ServiceCIDRs)`)
		// Unscoped Services still have the default ServiceCIDR.
		svc := mustCreateIn(t, ctx, c.CoreV1().Services("plain"), newService("after-full"))
		expectIn(t, svc, "10.0.0.0/24")
	})

	t.Run("full with fallback", func(t *testing.T) {
		svcs, err := fill("team-b", 8)
		if err != nil {
			t.Fatal(err)
		}
		for i, svc := range svcs {
			want := "10.2.0.0/29"
			if i >= 6 {
				want = "10.0.0.0/24"
			}
			expectIn(t, svc, want)
		}
	})

	t.Run("two scopes, one without fallback", func(t *testing.T) {
		svcs, err := fill("team-d", 10)
		if len(svcs) != 4 {
			t.Fatalf("team-d took %d addresses before %v, want 4", len(svcs), err)
		}
		for _, svc := range svcs {
			expectIn(t, svc, "10.5.0.0/30", "10.6.0.0/30")
		}
		expectStatus(t, err, 500, `range is full: ServiceCIDR "d-loose", "d-strict" of this Service's scope (no fallback to unscoped ServiceCIDRs)`)
	})

	t.Run("priority", func(t *testing.T) {
		// The low-priority ServiceCIDR is the older one and its name sorts
		// first (creation timestamps have a resolution of a second, then the
		// name orders): only the priority can put the newer one first.
		mustCreateScoped(t, ctx, c, "c-a-low", scopeAnnotations("ns", "team=c", "priority", "-5"), "10.3.0.0/29")
		waitRouted(t, c, "team-c", netip.MustParsePrefix("10.3.0.0/29"))
		mustCreateScoped(t, ctx, c, "c-b-high", scopeAnnotations("ns", "team=c", "priority", "100"), "10.4.0.0/29")
		waitRouted(t, c, "team-c", netip.MustParsePrefix("10.4.0.0/29"))
		svcs, err := fill("team-c", 20)
		if len(svcs) != 12 {
			t.Fatalf("team-c took %d addresses before %v, want 12", len(svcs), err)
		}
		for i, svc := range svcs {
			want := "10.4.0.0/29"
			if i >= 6 {
				want = "10.3.0.0/29"
			}
			expectIn(t, svc, want)
		}
		expectStatus(t, err, 500, `range is full: ServiceCIDR "c-a-low", "c-b-high" of this Service's scope`)
	})

	t.Run("service selector", func(t *testing.T) {
		// Every namespace, only Services labelled tier=db: the labels the
		// client sends reach the scope.
		mustCreateScoped(t, ctx, c, "db-any", scopeAnnotations("ns", "", "svc", "tier=db"), "10.7.0.0/29")
		db := func(s *corev1.Service) { s.Labels = map[string]string{"tier": "db"} }
		waitRouted(t, c, "plain", netip.MustParsePrefix("10.7.0.0/29"), db)
		expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("plain"), newService("db", db)), "10.7.0.0/29")
		expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("plain"), newService("web")), "10.0.0.0/24")
		// team-a's tier=db Services are in strict (full) and db-any.
		expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("db", db)), "10.7.0.0/29")
	})
}

// updateServiceCIDR reads the ServiceCIDR name, changes it with mutate and
// writes it back, again on a conflict (its controller writes it too).
func updateServiceCIDR(ctx context.Context, c kubernetes.Interface, name string, mutate func(*networkingv1.ServiceCIDR)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(sc)
		_, err = c.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{})
		return err
	})
}

func mustDeleteIn(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, name string) {
	t.Helper()
	if err := c.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s/%s: %v", ns, name, err)
	}
}

// TestScopesNamespaceRelabelled: a namespace relabelled out of its scope
// keeps its Services' addresses; the IPAddress repair reports them as
// outOfScope, with a ClusterIPOutOfScope event, and changes nothing; the
// namespace's next Service follows its new labels.
func TestScopesNamespaceRelabelled(t *testing.T) {
	t.Parallel()
	c := scopeServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	mustCreateNamespace(t, ctx, c, "team-a", map[string]string{"team": "a"})
	mustCreateScoped(t, ctx, c, "scope-a", scopeAnnotations("ns", "team=a"), "10.1.0.0/28")
	waitRouted(t, c, "team-a", netip.MustParsePrefix("10.1.0.0/28"))
	old := mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("old"))
	expectIn(t, old, "10.1.0.0/28")

	repair, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: c, Recorder: report.NewEventRecorder(ctx, c), Interval: time.Hour, OrphanGrace: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := repair.RunOnce(ctx); err != nil || !rep.Consistent() {
		t.Fatalf("repair before relabelling: %v %+v", err, rep)
	}

	ns, err := c.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["team"] = "z"
	if _, err := c.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRouted(t, c, "team-a", netip.MustParsePrefix("10.0.0.0/24"))

	rep, err := repair.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := rep.Find(report.TypeOutOfScope, old.Spec.ClusterIP)
	if !ok || p.Service != "team-a/old" || p.Reason != report.ReasonOutOfScope || !strings.Contains(p.Message, `it may use ServiceCIDR "kubernetes"`) {
		t.Fatalf("repair after relabelling: %+v, want outOfScope for team-a/old allowing kubernetes", rep.Problems)
	}
	if len(rep.Problems) != 1 || rep.Writes != 0 {
		t.Fatalf("repair found %d problems and wrote %d objects, want 1 and none: %+v", len(rep.Problems), rep.Writes, rep.Problems)
	}
	eventually(t, 30*time.Second, "a ClusterIPOutOfScope event on team-a/old", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, c, report.ReasonOutOfScope, "old")
	})

	got, err := c.CoreV1().Services("team-a").Get(ctx, "old", metav1.GetOptions{})
	if err != nil || got.Spec.ClusterIP != old.Spec.ClusterIP {
		t.Fatalf("team-a/old after relabelling: %v %v, want it to keep %s", got, err, old.Spec.ClusterIP)
	}
	// An update of a Service outside its scope now is not refused for it.
	got.Spec.Ports[0].Port = 81
	if got, err = c.CoreV1().Services("team-a").Update(ctx, got, metav1.UpdateOptions{}); err != nil || got.Spec.ClusterIP != old.Spec.ClusterIP {
		t.Fatalf("update of team-a/old after relabelling: %v %v, want it accepted, keeping %s", got, err, old.Spec.ClusterIP)
	}
	expectIPAddressOf(t, ctx, c, old.Spec.ClusterIP, "team-a", "old")
	expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("new")), "10.0.0.0/24")
}

// TestScopesIPv6: scopes apply per IP family. On a dual-stack server, an
// IPv6 /64 scoped to team=a gives team a's Services their IPv6 address while
// their IPv4 address comes from the default ServiceCIDR; other Services
// never get an address of the /64, and static addresses are checked per
// family. Once no unscoped ServiceCIDR serves IPv6, a Service in no scope is
// told which scoped ones exist.
func TestScopesIPv6(t *testing.T) {
	t.Parallel()
	c := scopeServer(t, "10.0.0.0/24,fd00::/108")
	ctx := testContext(t)
	mustCreateNamespace(t, ctx, c, "team-a", map[string]string{"team": "a"})
	mustCreateNamespace(t, ctx, c, "plain", nil)
	mustCreateScoped(t, ctx, c, "v6-a", scopeAnnotations("ns", "team=a"), "fd00:a::/64")
	dual := withPolicy(corev1.IPFamilyPolicyRequireDualStack)
	waitRouted(t, c, "team-a", netip.MustParsePrefix("fd00:a::/64"), dual)
	for i := range 5 {
		for _, ns := range []string{"team-a", "plain"} {
			svc := mustCreateIn(t, ctx, c.CoreV1().Services(ns), newService(fmt.Sprint("dual-", i), dual))
			if len(svc.Spec.ClusterIPs) != 2 {
				t.Fatalf("%s/%s: %v, want two families", ns, svc.Name, svc.Spec.ClusterIPs)
			}
			expectAddrIn(t, svc, svc.Spec.ClusterIPs[0], "10.0.0.0/24")
			expectAddrIn(t, svc, svc.Spec.ClusterIPs[1], map[string]string{"team-a": "fd00:a::/64", "plain": "fd00::/108"}[ns])
			expectIPAddressOf(t, ctx, c, svc.Spec.ClusterIPs[1], ns, svc.Name)
		}
	}
	// single → dual: the new secondary address follows the scope too.
	for _, ns := range []string{"team-a", "plain"} {
		single := mustCreateIn(t, ctx, c.CoreV1().Services(ns), newService("grow"))
		single.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
		grown, err := c.CoreV1().Services(ns).Update(ctx, single, metav1.UpdateOptions{})
		if err != nil || len(grown.Spec.ClusterIPs) != 2 || grown.Spec.ClusterIPs[0] != single.Spec.ClusterIP {
			t.Fatalf("%s/grow single → dual: %v %v", ns, grown, err)
		}
		expectAddrIn(t, grown, grown.Spec.ClusterIPs[1], map[string]string{"team-a": "fd00:a::/64", "plain": "fd00::/108"}[ns])
	}
	v6first := withFamilies(corev1.IPv6Protocol)
	expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("v6-only", v6first)), "fd00:a::/64")
	_, err := createIn(ctx, c, "team-a", newService("v6-static", withIP("fd00::50")))
	expectStatus(t, err, 422, `fd00::50 is in a ServiceCIDR scoped to other Services; this Service may use ServiceCIDR "v6-a"`)
	_, err = createIn(ctx, c, "plain", newService("v6-static", withIP("fd00:a::50")))
	expectStatus(t, err, 422, `fd00:a::50 is in a ServiceCIDR scoped to other Services; this Service may use ServiceCIDR "kubernetes"`)
	svc := mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("v6-static-in", withIP("fd00:a::ffff:1")))
	expectIPAddressOf(t, ctx, c, "fd00:a::ffff:1", "team-a", svc.Name)

	// With the default ServiceCIDR being deleted (it stays terminating: the
	// kubernetes Service holds its address), the /64 is the only IPv6
	// ServiceCIDR served: a Service in no scope is told so, not "range is
	// full", and team a's Services go on.
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, apiserver.DefaultServiceCIDRName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the allocator to stop serving the terminating default ServiceCIDR", func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Services("plain").Create(ctx, newService("probe", v6first), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "no ready ServiceCIDR"), err
	})
	_, err = createIn(ctx, c, "plain", newService("v6-none", v6first))
	expectStatus(t, err, 500, `no ready ServiceCIDR serves IPv6 addresses to this Service: ServiceCIDR "v6-a" is scoped to other Services, and no unscoped one serves IPv6`)
	expectIn(t, mustCreateIn(t, ctx, c.CoreV1().Services("team-a"), newService("v6-after", v6first)), "fd00:a::/64")
}

// TestScopeAnnotationsValidated: a bad scope is refused with 422 naming the
// annotation, on create and on update, and nothing is stored; the default
// ServiceCIDR cannot be scoped.
func TestScopeAnnotationsValidated(t *testing.T) {
	t.Parallel()
	c := scopeServer(t, "10.0.0.0/24")
	ctx := testContext(t)
	field := func(key string) string { return "metadata.annotations[" + key + "]" }
	cases := []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{"priority not a number", scopeAnnotations("ns", "team=a", "priority", "high"),
			[]string{field(scope.PriorityAnnotation), "must be an integer from -1000 to 1000"}},
		{"priority too high", scopeAnnotations("ns", "team=a", "priority", "1001"),
			[]string{field(scope.PriorityAnnotation), "must be an integer from -1000 to 1000"}},
		{"priority too low", scopeAnnotations("ns", "team=a", "priority", "-1001"),
			[]string{field(scope.PriorityAnnotation)}},
		{"fallback not a boolean", scopeAnnotations("ns", "team=a", "fallback", "yes"),
			[]string{field(scope.FallbackAnnotation), `must be "true" or "false"`}},
		{"bad namespace selector", scopeAnnotations("ns", "team in (a"),
			[]string{field(scope.NamespaceSelectorAnnotation), "must be a label selector"}},
		{"bad service selector", scopeAnnotations("ns", "team=a", "svc", "tier in db"),
			[]string{field(scope.ServiceSelectorAnnotation), "must be a label selector"}},
		{"service selector without namespace selector", scopeAnnotations("svc", "tier=db"),
			[]string{field(scope.NamespaceSelectorAnnotation), "Required value"}},
		{"unknown scope key", map[string]string{scope.NamespaceSelectorAnnotation: "", scope.Prefix + "weight": "3"},
			[]string{field(scope.Prefix + "weight"), "Unsupported value"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprint("bad-", i)
			_, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, newServiceCIDR(name, tc.annotations, fmt.Sprintf("10.%d.0.0/24", 100+i)), metav1.CreateOptions{})
			for _, want := range tc.want {
				expectStatus(t, err, 422, want)
			}
			if _, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("refused ServiceCIDR %s stored (%v)", name, err)
			}

			// The same annotations on an update of a valid ServiceCIDR.
			good := "good-" + name
			mustCreateScoped(t, ctx, c, good, scopeAnnotations("ns", "team=a"), fmt.Sprintf("10.%d.0.0/24", 150+i))
			err = updateServiceCIDR(ctx, c, good, func(sc *networkingv1.ServiceCIDR) { sc.Annotations = tc.annotations })
			for _, want := range tc.want {
				expectStatus(t, err, 422, want)
			}
			stored, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, good, metav1.GetOptions{})
			if err != nil || stored.Annotations[scope.NamespaceSelectorAnnotation] != "team=a" || len(stored.Annotations) != 1 {
				t.Errorf("after the refused update %s holds %v (%v), want its valid scope", good, stored.Annotations, err)
			}
		})
	}

	t.Run("default ServiceCIDR", func(t *testing.T) {
		err := updateServiceCIDR(ctx, c, apiserver.DefaultServiceCIDRName, func(sc *networkingv1.ServiceCIDR) {
			sc.Annotations = scopeAnnotations("ns", "team=a")
		})
		expectStatus(t, err, 422, `the default ServiceCIDR "kubernetes" cannot be scoped`)
	})

	t.Run("valid", func(t *testing.T) {
		annotations := scopeAnnotations("ns", "", "svc", "tier in (db,cache)", "priority", "-1000", "fallback", "false")
		annotations["example.com/other"] = "kept"
		if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, newServiceCIDR("valid", annotations, "10.250.0.0/24"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a valid scope refused: %v", err)
		}
	})
}
