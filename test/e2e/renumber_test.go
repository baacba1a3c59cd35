package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRenumberKubectl: an operator empties a ServiceCIDR with kubectl and
// the plugin, against `allocator serve` (IPAddress model, embedded etcd).
// Services created with `kubectl create service` hold addresses of "old";
// `kubectl annotate` drains it; `allocator status` counts its Services;
// `kubectl allocator renumber` lists them (dry run, the default) and then
// moves them, each to an address of the default range with its name and
// port; status then finds "old" empty, and `kubectl delete servicecidr`
// removes it.
func TestRenumberKubectl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not found")
	}
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--service-cluster-ip-range", "10.0.0.0/24")
	plugin := kubectlPlugin(t, bin)
	must := func(args ...string) string {
		t.Helper()
		out, ok := s.kubectl(t, args...)
		if !ok {
			t.Fatalf("kubectl %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	must("create", "namespace", "team-a")
	manifest := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: old
spec:
  cidrs: ["10.1.0.0/28"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	must("create", "-f", manifest)
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, ok := s.kubectl(t, "create", "service", "clusterip", "probe", "-n", "team-a", "--tcp=80:8080", "--clusterip=10.1.0.14", "--dry-run=server")
		last = out
		return ok, nil
	})
	if err != nil {
		t.Fatalf("ServiceCIDR old not served within 30s (last probe: %s)", last)
	}
	old := map[string]string{"web": "10.1.0.5", "db": "10.1.0.6", "cache": "10.1.0.7"}
	for name, ip := range old {
		must("create", "service", "clusterip", name, "-n", "team-a", "--tcp=80:8080", "--clusterip="+ip)
	}
	must("annotate", "servicecidr", "old", "lifecycle.allocator.github.io/draining=true")

	status := func(want string) {
		t.Helper()
		out, code := runJob(t, bin, "status", "--kubeconfig", s.kubeconfig)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("allocator status: exit %d, want %q:\n%s", code, want, out)
		}
	}
	status("ServiceCIDR/old 10.1.0.0/28 is draining: 3 Services still hold addresses in it")

	journal := filepath.Join(t.TempDir(), "renumber.journal")
	out, errOut, code := plugin("allocator", "renumber", "--kubeconfig", s.kubeconfig, "--from", "old", "-n", "team-a", "--journal", journal)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^team-a\s+web\s+10\.1\.0\.5\s+-\s+would move$`),
		regexp.MustCompile(`(?m)^dry run: 3 Services would move out of ServiceCIDR old \(10\.1\.0\.0/28\); nothing changed; --dry-run=false moves them$`),
	} {
		if code != 0 || !want.MatchString(out) {
			t.Fatalf("kubectl allocator renumber (dry run): exit %d, want 0 and %s:\n%s%s", code, want, out, errOut)
		}
	}
	for name, ip := range old {
		if got := strings.TrimSpace(must("get", "service", name, "-n", "team-a", "-o", "jsonpath={.spec.clusterIP}")); got != ip {
			t.Errorf("after the dry run %s has %s, want %s", name, got, ip)
		}
	}

	out, errOut, code = plugin("allocator", "renumber", "--kubeconfig", s.kubeconfig, "--from", "old", "-n", "team-a", "--journal", journal, "--dry-run=false")
	if summary := regexp.MustCompile(`(?m)^3 Services moved out of ServiceCIDR old \(10\.1\.0\.0/28\) in .*; verified$`); code != 0 || !summary.MatchString(out) {
		t.Fatalf("kubectl allocator renumber --dry-run=false: exit %d, want 0 and %s:\n%s%s", code, summary, out, errOut)
	}
	defaultRange := netip.MustParsePrefix("10.0.0.0/24")
	for name := range old {
		got := must("get", "service", name, "-n", "team-a", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].port}")
		ip, port, _ := strings.Cut(strings.TrimSpace(got), " ")
		if addr, err := netip.ParseAddr(ip); err != nil || !defaultRange.Contains(addr) || port != "80" {
			t.Errorf("after the renumber %s has %q, want an address of %s and port 80", name, got, defaultRange)
		}
	}
	status("ServiceCIDR/old 10.1.0.0/28 is draining: no Service holds an address in it")

	must("delete", "servicecidr", "old", "--wait=false")
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, ok := s.kubectl(t, "get", "servicecidr", "old")
		last = out
		return !ok && strings.Contains(out, "NotFound"), nil
	})
	if err != nil {
		t.Fatalf("the emptied ServiceCIDR old is still there after a minute: %s", last)
	}
}
