package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/pkg/repair/report"
)

// TestKubectlScopes: an operator scopes a ServiceCIDR with kubectl and
// `allocator serve` (IPAddress model, embedded etcd) routes Services by it.
// A ServiceCIDR applied unscoped is scoped with `kubectl annotate` (a bad
// annotation is refused with the field named); Services created with
// `kubectl create` in the labelled namespace get its addresses, those of
// another namespace the default ones; `kubectl get ipaddresses` shows each
// address with its Service; `allocator status` shows the SCOPE column; a
// static address outside the scope is refused by kubectl with the 422
// message; after the namespace is relabelled, `allocator repair --dry-run`
// reports the Service as outOfScope, with the label or recreate that
// clears it, exits 0 (left by design), and its address stays.
func TestKubectlScopes(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not found")
	}
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--service-cluster-ip-range", "10.0.0.0/24")
	must := func(args ...string) string {
		t.Helper()
		out, ok := s.kubectl(t, args...)
		if !ok {
			t.Fatalf("kubectl %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	must("create", "namespace", "team-a")
	must("label", "namespace", "team-a", "team=a")
	must("create", "namespace", "other")

	manifest := filepath.Join(t.TempDir(), "scope-a.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: scope-a
spec:
  cidrs: ["10.1.0.0/28"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	must("apply", "-f", manifest)
	out, ok := s.kubectl(t, "annotate", "servicecidr", "scope-a", "scope.allocator.github.io/namespace-selector=team=a", "scope.allocator.github.io/priority=high")
	if want := `metadata.annotations[scope.allocator.github.io/priority]: Invalid value: "high": must be an integer from -1000 to 1000`; ok || !strings.Contains(out, want) {
		t.Fatalf("annotate with a bad priority: succeeded=%v, output %q, want %q", ok, out, want)
	}
	must("annotate", "servicecidr", "scope-a", "scope.allocator.github.io/namespace-selector=team=a")

	// The allocator serves the scope once its informer has it: probe with
	// server-side dry runs, which allocate nothing.
	scopeA := netip.MustParsePrefix("10.1.0.0/28")
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, ok := s.kubectl(t, "create", "service", "clusterip", "probe", "-n", "team-a", "--tcp=80:8080", "--dry-run=server", "-o", "jsonpath={.spec.clusterIP}")
		last = out
		ip, err := netip.ParseAddr(strings.TrimSpace(out))
		return ok && err == nil && scopeA.Contains(ip), nil
	})
	if err != nil {
		t.Fatalf("team-a's Services not routed into %s within 30s (last probe: %s)", scopeA, last)
	}

	ips := map[string]string{}
	for _, ns := range []string{"team-a", "other"} {
		for _, name := range []string{"web", "db"} {
			must("create", "service", "clusterip", name, "-n", ns, "--tcp=80:8080")
			ips[ns+"/"+name] = strings.TrimSpace(must("get", "service", name, "-n", ns, "-o", "jsonpath={.spec.clusterIP}"))
		}
	}
	for svc, ip := range ips {
		addr, err := netip.ParseAddr(ip)
		want := netip.MustParsePrefix("10.0.0.0/24")
		if strings.HasPrefix(svc, "team-a/") {
			want = scopeA
		}
		if err != nil || !want.Contains(addr) {
			t.Errorf("%s got %q, want an address in %s", svc, ip, want)
		}
	}

	// kubectl get ipaddresses: each address, as a table and as objects,
	// references its Service.
	table := must("get", "ipaddresses")
	var list networkingv1.IPAddressList
	if err := json.Unmarshal([]byte(must("get", "ipaddresses", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	for svc, ip := range ips {
		ns, name, _ := strings.Cut(svc, "/")
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ip) + `\s+services/` + regexp.QuoteMeta(ns) + `/` + regexp.QuoteMeta(name) + `\s`)
		if !row.MatchString(table) {
			t.Errorf("kubectl get ipaddresses has no row %s services/%s:\n%s", ip, svc, table)
		}
		i := slices.IndexFunc(list.Items, func(o networkingv1.IPAddress) bool { return o.Name == ip })
		if i < 0 {
			t.Errorf("no IPAddress %s for %s", ip, svc)
			continue
		}
		want := networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: name}
		if ref := list.Items[i].Spec.ParentRef; ref == nil || *ref != want {
			t.Errorf("IPAddress %s parentRef %+v, want %+v", ip, ref, want)
		}
	}

	// allocator status: the SCOPE column, the scope text on scope-a's rows
	// and "-" on the default ServiceCIDR's; JSON carries the scope per CIDR.
	out, code := runJob(t, bin, "status", "--kubeconfig", s.kubeconfig)
	if header := regexp.MustCompile(`^FAMILY\s.*\sTOP NAMESPACES\s+SCOPE\n`); code != 0 || !header.MatchString(out) {
		t.Fatalf("allocator status: exit %d, want a SCOPE column last:\n%s", code, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^IPv4\s+10\.1\.0\.0/28\s+all\s+14\s+2\s+12\s.*\bteam-a=2\s+namespaces team=a$`),
		regexp.MustCompile(`(?m)^IPv4\s+10\.0\.0\.0/24\s+all\s+254\s+3\s+251\s.*\s-$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("allocator status lacks %s:\n%s", want, out)
		}
	}
	if hint := "give --etcd-servers to list writers that ignore them"; !strings.Contains(out, hint) {
		t.Errorf("allocator status without etcd flags lacks %q:\n%s", hint, out)
	}
	// With the etcd flags it looks for writers that ignore scopes: none here.
	out, code = runJob(t, bin, append([]string{"status", "--kubeconfig", s.kubeconfig}, s.etcdFlags...)...)
	if code != 0 || !strings.Contains(out, "namespaces team=a") || strings.Contains(out, "WARNING") || strings.Contains(out, "give --etcd-servers") {
		t.Errorf("allocator status with the etcd flags: exit %d, want the scope and no writer ignoring it:\n%s", code, out)
	}
	out, code = runJob(t, bin, "status", "--kubeconfig", s.kubeconfig, "-o", "json")
	var st struct {
		CIDRs []struct {
			CIDR  string `json:"cidr"`
			Scope string `json:"scope"`
		} `json:"cidrs"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("allocator status -o json: exit %d, %v\n%s", code, err, out)
	}
	scopes := map[string]string{}
	for _, c := range st.CIDRs {
		scopes[c.CIDR] = c.Scope
	}
	if scopes["10.1.0.0/28"] != "namespaces team=a" || scopes["10.0.0.0/24"] != "" {
		t.Errorf("status JSON scopes %v, want 10.1.0.0/28 scoped to team=a and the default unscoped", scopes)
	}

	// A static address outside the scope: kubectl shows the 422.
	out, ok = s.kubectl(t, "create", "service", "clusterip", "static", "-n", "team-a", "--tcp=80:8080", "--clusterip=10.0.0.50")
	if want := `Service "static" is invalid: spec.clusterIPs: Invalid value: ["10.0.0.50"]: failed to allocate IP 10.0.0.50: 10.0.0.50 is in a ServiceCIDR scoped to other Services; this Service may use ServiceCIDR "scope-a"`; ok || !strings.Contains(out, want) {
		t.Errorf("static address outside the scope: succeeded=%v, output %q, want %q", ok, out, want)
	}
	free := scopeA.Addr().Next()
	for slices.Contains(slices.Collect(maps.Values(ips)), free.String()) {
		free = free.Next()
	}
	out, ok = s.kubectl(t, "create", "service", "clusterip", "static", "-n", "other", "--tcp=80:8080", "--clusterip="+free.String())
	if want := `this Service may use ServiceCIDR "kubernetes"`; ok || !strings.Contains(out, want) {
		t.Errorf("unscoped Service, static address in the scope: succeeded=%v, output %q, want %q", ok, out, want)
	}

	// Relabelled out of the scope: the repair job reports, moves nothing.
	must("label", "namespace", "team-a", "team=z", "--overwrite")
	args := append([]string{"repair", "--dry-run", "-o", "json", "--kubeconfig", s.kubeconfig}, s.etcdFlags...)
	out, code = runJob(t, bin, args...)
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("repair --dry-run -o json: %v\n%s", err, out)
	}
	for _, svc := range []string{"team-a/web", "team-a/db"} {
		p, found := rep.Find(report.TypeOutOfScope, ips[svc])
		if !found || p.Service != svc {
			t.Errorf("repair report lacks outOfScope %s of %s: %+v", ips[svc], svc, rep.Problems)
		}
		if want := `kubectl label namespace team-a (or the Service) so that the scope of ServiceCIDR "scope-a"`; !strings.Contains(p.Clear, want) {
			t.Errorf("outOfScope %s of %s: clear %q, want it to say %q", ips[svc], svc, p.Clear, want)
		}
	}
	// Left by design: reported, and the job stays green.
	if len(rep.Problems) != 2 || code != 0 {
		t.Errorf("repair --dry-run: exit %d, problems %+v; want exit 0 and the two outOfScope", code, rep.Problems)
	}
	if got := strings.TrimSpace(must("get", "service", "web", "-n", "team-a", "-o", "jsonpath={.spec.clusterIP}")); got != ips["team-a/web"] {
		t.Errorf("team-a/web moved from %s to %s", ips["team-a/web"], got)
	}
}
