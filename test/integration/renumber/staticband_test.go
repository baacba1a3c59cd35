package renumber_test

import (
	"context"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/internal/testserver"
)

// TestRenumberKeepsClusterDNS replaces the default range 10.96.0.0/16
// (dual-stack, with fd00:96::/112) by 10.100.0.0/16 and fd00:100::/112 with
// docs/operations.md's "Replacing the default range" and its cluster DNS
// steps, with the Services a cluster has in the static band:
// kube-system/kube-dns at 10.96.0.10 and fd00:96::a with node ports, and
// default/ingress at 10.96.0.20, whose offset's address 10.100.0.20 another
// Service holds. While a bridge Service kube-dns-next holds 10.100.0.10,
// the dry run leaves kube-dns and ingress, naming the holders (exit 2);
// the rest moves with -A -l 'k8s-app!=kube-dns'. Once the bridge is
// deleted, kube-dns alone is shown keeping 10.96.0.10 -> 10.100.0.10 and
// moved there, and to fd00:100::a, with its node ports; ingress moves to
// any free address with --keep-static-offsets=false.
func TestRenumberKeepsClusterDNS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/16,fd00:96::/112", Model: "ipaddress"})
	c := s.Client
	dns := service(metav1.NamespaceSystem, "kube-dns", corev1.ServiceTypeNodePort, []string{"10.96.0.10", "fd00:96::a"}, v4, v6)
	dns.Labels = map[string]string{"k8s-app": "kube-dns"}
	dns.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
	dns.Spec.Ports = []corev1.ServicePort{
		{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP, NodePort: 30053},
		{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolTCP, NodePort: 30054},
	}
	for _, svc := range []*corev1.Service{
		dns,
		service(metav1.NamespaceDefault, "ingress", corev1.ServiceTypeClusterIP, []string{"10.96.0.20"}),
		service(metav1.NamespaceDefault, "web", corev1.ServiceTypeClusterIP, nil),
	} {
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", svc.Namespace, svc.Name, err)
		}
	}
	createServiceCIDR(ctx, t, c, "new", "10.100.0.0/16", "fd00:100::/112")
	waitServed(ctx, t, c, "10.100.0.200")
	bridge := service(metav1.NamespaceSystem, "kube-dns-next", corev1.ServiceTypeClusterIP, []string{"10.100.0.10"})
	bridge.Labels, bridge.Spec.Selector, bridge.Spec.Ports = nil, dns.Spec.Selector, []corev1.ServicePort{
		{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolTCP},
	}
	squatter := service(metav1.NamespaceDefault, "squatter", corev1.ServiceTypeClusterIP, []string{"10.100.0.20"})
	for _, svc := range []*corev1.Service{bridge, squatter} {
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", svc.Namespace, svc.Name, err)
		}
	}
	drain(ctx, t, c, "kubernetes", "10.96.0.200")
	before := listServices(ctx, t, c)
	kube := "--kubeconfig=" + s.KubeconfigPath
	journal := "--journal=" + t.TempDir() + "/j"
	expect := func(what, out string, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("%s: the output lacks %s", what, want)
			}
		}
	}

	out, errOut, code := runCLI(ctx, "renumber", kube, "--from=kubernetes", "-A", journal)
	t.Logf("dry run -A:\n%s%s", out, errOut)
	expect("dry run -A", out,
		`(?m)^kube-system/kube-dns left: 10\.96\.0\.10 is in the static band and keeps its offset 10 as 10\.100\.0\.10, which Service kube-system/kube-dns-next holds; `,
		`(?m)^default/ingress left: 10\.96\.0\.20 is in the static band and keeps its offset 20 as 10\.100\.0\.20, which Service default/squatter holds; `,
		`(?m)^default\s+web\s+10\.96\.\d+\.\d+\s+-\s+would move$`)
	if code != 2 || !strings.Contains(errOut, "2 Services not moved: default/ingress, kube-system/kube-dns") {
		t.Errorf("dry run -A: exit %d, stderr %q; want 2 naming default/ingress and kube-system/kube-dns", code, errOut)
	}

	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=kubernetes", "-A", "-l", "k8s-app!=kube-dns", "--dry-run=false", journal)
	if code != 2 || !strings.Contains(out, "1 Service moved") || !strings.Contains(errOut, "1 Service not moved: default/ingress") {
		t.Fatalf("renumber -A -l k8s-app!=kube-dns: exit %d, want 2 (default/ingress left) and web moved:\n%s%s", code, out, errOut)
	}
	if ip := listServices(ctx, t, c)["default/web"].Spec.ClusterIP; !mustPrefix("10.100.0.0/16").Contains(netip.MustParseAddr(ip)) {
		t.Errorf("web: %s, want an address of 10.100.0.0/16", ip)
	}

	// The kubelets and pods are switched to the bridge; then it goes and
	// kube-dns takes its address.
	if err := c.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, bridge.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsOnly := []string{"renumber", kube, "--from=kubernetes", "-n", "kube-system", "-l", "k8s-app=kube-dns", journal}
	poll(ctx, t, 30*time.Second, "the dry run no longer sees 10.100.0.10 held", func() (bool, error) {
		out, errOut, code = runCLI(ctx, dnsOnly...)
		return code == 0, nil
	})
	t.Logf("dry run -n kube-system -l k8s-app=kube-dns:\n%s%s", out, errOut)
	expect("dry run of kube-dns", out,
		`(?m)^kube-system\s+kube-dns\s+10\.96\.0\.10,fd00:96::a\s+10\.100\.0\.10,fd00:100::a\s+would move$`,
		`(?m)^kube-system/kube-dns would keep its static-band offset: 10\.96\.0\.10 -> 10\.100\.0\.10 \(offset 10\), fd00:96::a -> fd00:100::a \(offset 10\)$`,
		`; 1 Service would keep its static-band offset; nothing changed`)

	out, errOut, code = runCLI(ctx, append(dnsOnly, "--dry-run=false")...)
	t.Logf("renumber kube-dns:\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, "1 Service moved") || !strings.Contains(out, "1 Service kept its static-band offset; verified") {
		t.Fatalf("renumber kube-dns: exit %d, want 0, 1 moved, its offset kept, verified", code)
	}
	got := listServices(ctx, t, c)["kube-system/kube-dns"]
	if want := []string{"10.100.0.10", "fd00:100::a"}; !slices.Equal(got.Spec.ClusterIPs, want) {
		t.Errorf("kube-dns: clusterIPs %v, want %v", got.Spec.ClusterIPs, want)
	}
	for i, p := range got.Spec.Ports {
		if had := before["kube-system/kube-dns"].Spec.Ports[i].NodePort; p.NodePort != had {
			t.Errorf("kube-dns: port %s has node port %d, had %d", p.Name, p.NodePort, had)
		}
	}
	if got.UID == before["kube-system/kube-dns"].UID {
		t.Error("kube-dns was not re-created")
	}
	t.Logf("kept offsets: kube-dns %v -> %v, node ports %d/%d",
		before["kube-system/kube-dns"].Spec.ClusterIPs, got.Spec.ClusterIPs, got.Spec.Ports[0].NodePort, got.Spec.Ports[1].NodePort)

	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=kubernetes", "-n", "default", "-l", "app=ingress", "--keep-static-offsets=false", "--dry-run=false", journal)
	if code != 0 || !strings.Contains(out, "1 Service moved") {
		t.Fatalf("renumber ingress --keep-static-offsets=false: exit %d:\n%s%s", code, out, errOut)
	}
	ip := listServices(ctx, t, c)["default/ingress"].Spec.ClusterIP
	if addr := netip.MustParseAddr(ip); !mustPrefix("10.100.0.0/16").Contains(addr) || ip == "10.100.0.20" {
		t.Errorf("ingress after --keep-static-offsets=false: %s, want another address of 10.100.0.0/16", ip)
	}
}

// TestRenumberReportsTakenOffset: a Service at 10.1.0.10, in the static band
// of the draining "old", is to keep its offset as 10.96.0.10; between its
// delete and its create another Service takes 10.96.0.10. The move
// re-creates it at another address and reports the change (Changed, naming
// the offset), rather than leaving it deleted or changing it silently.
func TestRenumberReportsTakenOffset(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startWithOld(ctx, t, "10.96.0.0/24")
	c := s.Client
	victim := service(metav1.NamespaceDefault, "victim", corev1.ServiceTypeClusterIP, []string{"10.1.0.10"})
	if _, err := c.CoreV1().Services(victim.Namespace).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drain(ctx, t, c, "old", "10.1.0.201")

	thief := service(metav1.NamespaceDefault, "thief", corev1.ServiceTypeClusterIP, []string{"10.96.0.10"})
	m := renumberWhileThiefTakes(ctx, t, s, thief)
	if want := "static-band address 10.1.0.10 was to keep its offset 10 as 10.96.0.10, is now 10.96.0."; m.Outcome != renumber.Changed || !strings.Contains(m.Reason, want) {
		t.Errorf("the victim's move: %s (%s), want %q and %q", m.Outcome, m.Reason, renumber.Changed, want)
	}
	if len(m.Offsets) != 0 {
		t.Errorf("the victim's move reports kept offsets %v, want none", m.Offsets)
	}
	got, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the victim after the move: %v", err)
	}
	if ip := netip.MustParseAddr(got.Spec.ClusterIP); ip.String() == "10.96.0.10" || !mustPrefix("10.96.0.0/24").Contains(ip) {
		t.Errorf("the victim holds %s, want another address of 10.96.0.0/24 than the thief's 10.96.0.10", ip)
	}
	t.Logf("the victim's move: %s: %s", m.Outcome, m.Reason)
}
