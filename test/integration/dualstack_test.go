package integration

import (
	"context"
	"crypto/tls"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // only probes the 401

func TestDualStack(t *testing.T) {
	t.Parallel()
	forEachModel(t, testDualStack)
}

func testDualStack(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16,fd00:10:96::/112"})
	c := s.client
	ctx := testContext(t)

	sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(sc.Spec.CIDRs) != 2 {
		t.Fatalf("default ServiceCIDR: %v %v", sc, err)
	}

	single := mustCreate(t, ctx, c, newService("single"))
	if len(single.Spec.ClusterIPs) != 1 || !netip.MustParseAddr(single.Spec.ClusterIP).Is4() {
		t.Errorf("default is single-stack primary family: %v", single.Spec.ClusterIPs)
	}

	req := mustCreate(t, ctx, c, newService("require", withPolicy(corev1.IPFamilyPolicyRequireDualStack)))
	if len(req.Spec.ClusterIPs) != 2 || len(req.Spec.IPFamilies) != 2 || req.Spec.IPFamilies[1] != corev1.IPv6Protocol {
		t.Fatalf("RequireDualStack: %v %v", req.Spec.ClusterIPs, req.Spec.IPFamilies)
	}
	if !netip.MustParsePrefix("fd00:10:96::/112").Contains(netip.MustParseAddr(req.Spec.ClusterIPs[1])) {
		t.Errorf("secondary %s not in the IPv6 range", req.Spec.ClusterIPs[1])
	}

	v6first := mustCreate(t, ctx, c, newService("v6first", withPolicy(corev1.IPFamilyPolicyPreferDualStack), withFamilies(corev1.IPv6Protocol)))
	if len(v6first.Spec.ClusterIPs) != 2 || !netip.MustParseAddr(v6first.Spec.ClusterIP).Is6() {
		t.Errorf("IPv6-first dual-stack: %v", v6first.Spec.ClusterIPs)
	}
	v6only := mustCreate(t, ctx, c, newService("v6only", withIP("fd00:10:96::20")))
	if v6only.Spec.IPFamilies[0] != corev1.IPv6Protocol || len(v6only.Spec.ClusterIPs) != 1 {
		t.Errorf("static IPv6: %v %v", v6only.Spec.ClusterIPs, v6only.Spec.IPFamilies)
	}
	_, err = create(ctx, c, newService("two-v6", withIP("fd00:10:96::30", "fd00:10:96::31"), withPolicy(corev1.IPFamilyPolicyRequireDualStack)))
	expectStatus(t, err, 422, "may specify no more than one IP for each IP family")
	expectFree(t, ctx, c, "fd00:10:96::30")

	// single → dual allocates the secondary.
	up := single.DeepCopy()
	p := corev1.IPFamilyPolicyPreferDualStack
	up.Spec.IPFamilyPolicy = &p
	got, err := c.CoreV1().Services("default").Update(ctx, up, metav1.UpdateOptions{})
	if err != nil || len(got.Spec.ClusterIPs) != 2 || got.Spec.ClusterIPs[0] != single.Spec.ClusterIP {
		t.Fatalf("single→dual: %v %v", got, err)
	}
	secondary := got.Spec.ClusterIPs[1]
	expectTaken(t, ctx, c, secondary)

	// dual → single releases it.
	down := got.DeepCopy()
	ss := corev1.IPFamilyPolicySingleStack
	down.Spec.IPFamilyPolicy = &ss
	got, err = c.CoreV1().Services("default").Update(ctx, down, metav1.UpdateOptions{})
	if err != nil || len(got.Spec.ClusterIPs) != 1 || len(got.Spec.IPFamilies) != 1 {
		t.Fatalf("dual→single: %v %v", got, err)
	}
	expectFree(t, ctx, c, secondary)

	// Cutting the secondary without SingleStack is refused.
	cut := req.DeepCopy()
	cut.Spec.ClusterIPs = cut.Spec.ClusterIPs[:1]
	cut.Spec.IPFamilies = cut.Spec.IPFamilies[:1]
	_, err = c.CoreV1().Services("default").Update(ctx, cut, metav1.UpdateOptions{})
	expectStatus(t, err, 422, "must be 'SingleStack'")

	// Delete releases both families.
	mustDelete(t, ctx, c, "require")
	expectFree(t, ctx, c, req.Spec.ClusterIPs[0])
	expectFree(t, ctx, c, req.Spec.ClusterIPs[1])

	// Headless without selector takes every family.
	h := mustCreate(t, ctx, c, newService("headless", withIP("None"), func(s *corev1.Service) { s.Spec.Selector = nil }))
	if len(h.Spec.IPFamilies) != 2 {
		t.Errorf("selectorless headless families: %v", h.Spec.IPFamilies)
	}
}

// TestGrowToDualStack restarts a single-stack server with a dual-stack range:
// the default ServiceCIDR grows, old Services keep their IPs and new ones may
// be dual-stack.
func TestGrowToDualStack(t *testing.T) {
	t.Parallel()
	forEachModel(t, testGrowToDualStack)
}

func testGrowToDualStack(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16"})
	ctx := testContext(t)
	old := mustCreate(t, ctx, s.client, newService("old"))
	s.stop()

	s2 := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16,fd00:10:96::/112", etcd: s.etcd, dataDir: s.dataDir})
	c := s2.client
	eventually(t, 30*time.Second, "default ServiceCIDR grown", func(ctx context.Context) (bool, error) {
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && slices.Equal(sc.Spec.CIDRs, []string{"10.96.0.0/16", "fd00:10:96::/112"}), err
	})
	got, err := c.CoreV1().Services("default").Get(ctx, "old", metav1.GetOptions{})
	if err != nil || got.Spec.ClusterIP != old.Spec.ClusterIP {
		t.Fatalf("old Service after restart: %v %v", got, err)
	}
	dual := mustCreate(t, ctx, c, newService("dual", withPolicy(corev1.IPFamilyPolicyRequireDualStack)))
	if len(dual.Spec.ClusterIPs) != 2 {
		t.Fatalf("dual-stack after growth: %v", dual.Spec.ClusterIPs)
	}
}
