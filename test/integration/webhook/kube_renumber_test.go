package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/app"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// TestWebhookKubeRenumber: `allocator renumber --from old` without --to,
// through a dual-stack kube-apiserver with the webhook in front, moves
// every Service out of the draining range and none lands back in it:
// kube-apiserver would pick any ServiceCIDR, draining ones included, for a
// dry run and a create; the webhook picks the creates' addresses, and
// names what a dry run's create would get in a warning that renumber
// reads. A static-band address keeps its offset; a dual-stack Service
// keeps its IPv6 address.
func TestWebhookKubeRenumber(t *testing.T) {
	k := startKube(t, "10.96.0.0/16,fd00:96::/108")
	ctx := context.Background()
	_, rs := startWebhookOn(t, k, 2, servicecidrs.Policy{})
	mustCreateCIDR(t, k.client, "old", "10.200.0.0/24", nil)
	mustCreateCIDR(t, k.client, "new", "10.100.0.0/24", nil)
	for _, r := range rs {
		for _, p := range []string{"10.200.0.0/24", "10.100.0.0/24"} {
			waitServed(t, r, p)
		}
	}
	static := func(name string, ips ...string) *corev1.Service {
		s := service("default", name)
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		if len(ips) == 2 {
			require := corev1.IPFamilyPolicyRequireDualStack
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &require, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}
		return s
	}
	var want []*corev1.Service
	for i := range 12 {
		want = append(want, static(fmt.Sprintf("single-%d", i), fmt.Sprintf("10.200.0.%d", 100+i)))
	}
	for i := range 6 {
		want = append(want, static(fmt.Sprintf("dual-%d", i), fmt.Sprintf("10.200.0.%d", 150+i), fmt.Sprintf("fd00:96::%x", 0x1000+i)))
	}
	want = append(want, static("dns", "10.200.0.10")) // the static band: offset 10
	for _, s := range want {
		if _, err := k.client.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, lifecycle.DrainingAnnotation)
	if _, err := k.client.NetworkingV1().ServiceCIDRs().Patch(ctx, "old", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both replicas see old draining: a requested address in it is refused
	// four times in a row (the front alternates between them).
	refused := 0
	waitUntilT(t, 30*time.Second, "both replicas refuse an address of the draining range", func() bool {
		_, err := k.client.CoreV1().Services("default").Create(ctx, static("probe", "10.200.0.200"), metav1.CreateOptions{})
		if err == nil {
			refused = 0
			_ = k.client.CoreV1().Services("default").Delete(ctx, "probe", metav1.DeleteOptions{})
			return false
		}
		if strings.Contains(err.Error(), "draining") {
			refused++
		}
		return refused >= 4
	})

	var out, errOut bytes.Buffer
	code := app.Run(ctx, []string{"renumber", "--kubeconfig", k.kubeconfig, "-n", "default", "--from", "old", "--dry-run=false",
		"--journal", filepath.Join(t.TempDir(), "journal")}, app.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	t.Logf("renumber exit %d:\n%s%s", code, out.String(), errOut.String())
	if code != 0 {
		t.Fatalf("renumber --from old: exit %d, want 0", code)
	}
	old := netip.MustParsePrefix("10.200.0.0/24")
	for _, w := range want {
		got, err := k.client.CoreV1().Services("default").Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s after the renumber: %v", w.Name, err)
			continue
		}
		ip := netip.MustParseAddr(got.Spec.ClusterIP)
		switch {
		case old.Contains(ip):
			t.Errorf("%s at %s: still, or back, in the draining range", w.Name, ip)
		case w.Name == "dns" && ip != netip.MustParseAddr("10.96.0.10") && ip != netip.MustParseAddr("10.100.0.10"):
			t.Errorf("dns at %s: want offset 10 kept (10.96.0.10 or 10.100.0.10)", ip)
		case len(w.Spec.ClusterIPs) == 2 && (len(got.Spec.ClusterIPs) != 2 || got.Spec.ClusterIPs[1] != w.Spec.ClusterIPs[1]):
			t.Errorf("%s: clusterIPs %v, want its IPv6 address %s kept", w.Name, got.Spec.ClusterIPs, w.Spec.ClusterIPs[1])
		}
	}
}
