package renumber_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

var (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

// TestRenumberServices: on a dual-stack server, a ServiceCIDR "old"
// (IPv4) is drained and renumbered in one namespace. The dry run (the
// default) lists the Services and changes nothing; the real run re-creates
// each one outside "old": a single-stack Service, a dual-stack one that
// keeps its IPv6 address, an IPv6-first one whose IPv4 secondary moves, a
// NodePort Service that keeps its node port. Their addresses lie in the
// static band of "old" (10.1.0.1-10.1.0.16), so each keeps its offset in
// the default range the server picks from (10.1.0.10 becomes 10.96.0.10),
// which the dry run shows. A Service with a finalizer is left untouched and
// named (exit 2); a Service in another namespace is counted outside the
// selection, then moved with --to into a manual-only ServiceCIDR, at its
// offset there (a --to scoped to other namespaces is refused by the dry run
// and leaves it). A --from that is not draining is refused, naming the
// annotation.
func TestRenumberServices(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startWithOld(ctx, t, "10.96.0.0/24,fd00:96::/112")
	c := s.Client
	createNamespace(ctx, t, c, "a")
	createNamespace(ctx, t, c, "b")
	fin := service("a", "fin", corev1.ServiceTypeClusterIP, []string{"10.1.0.14"})
	fin.Finalizers = []string{"example.com/hold"}
	for _, svc := range []*corev1.Service{
		service("a", "single", corev1.ServiceTypeClusterIP, []string{"10.1.0.10"}),
		service("a", "dual4", corev1.ServiceTypeClusterIP, []string{"10.1.0.11", "fd00:96::11"}, v4, v6),
		service("a", "dual6", corev1.ServiceTypeClusterIP, []string{"fd00:96::12", "10.1.0.12"}, v6, v4),
		service("a", "np", corev1.ServiceTypeNodePort, []string{"10.1.0.13"}),
		service("a", "stays", corev1.ServiceTypeClusterIP, nil),
		fin,
		service("b", "other", corev1.ServiceTypeClusterIP, []string{"10.1.0.15"}),
	} {
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", svc.Namespace, svc.Name, err)
		}
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		c.CoreV1().Services("a").Patch(context.Background(), "fin", types.MergePatchType, patch, metav1.PatchOptions{})
	})
	kube := "--kubeconfig=" + s.KubeconfigPath
	journal := filepath.Join(t.TempDir(), "renumber.journal")

	_, errOut, code := runCLI(ctx, "renumber", kube, "--from=old", "-n", "a")
	want := "ServiceCIDR old is not draining: set " + lifecycle.DrainingAnnotation + "=true first"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("renumber of a range that is not draining: exit %d, stderr %q, want 1 and %q", code, errOut, want)
	}
	drain(ctx, t, c, "old", "10.1.0.201")
	before := listServices(ctx, t, c)

	out, errOut, code := runCLI(ctx, "renumber", kube, "--from=old", "-n", "a", "-l", "tier=web", "--journal="+journal)
	for _, row := range []string{
		`(?m)^a\s+single\s+10\.1\.0\.10\s+10\.96\.0\.10\s+would move$`,
		`(?m)^a\s+dual4\s+10\.1\.0\.11,fd00:96::11\s+10\.96\.0\.11,fd00:96::11\s+would move$`,
		`(?m)^a/single would keep its static-band offset: 10\.1\.0\.10 -> 10\.96\.0\.10 \(offset 10\)$`,
		`(?m)^a\s+fin\s+10\.1\.0\.14\s+-\s+left$`,
		`(?m)^a/fin left: has finalizers example.com/hold`,
		`dry run: 4 Services would move out of ServiceCIDR old \(10\.1\.0\.0/24\); 1 left; 1 more Service in the range outside the selection`,
	} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("dry run output lacks %s:\n%s", row, out)
		}
	}
	if code != 2 || !strings.Contains(errOut, "1 Service not moved: a/fin") {
		t.Errorf("dry run: exit %d, stderr %q; want 2 naming a/fin", code, errOut)
	}
	checkMoved(t, before, listServices(ctx, t, c), netip.MustParsePrefix("192.0.2.0/24")) // nothing changed

	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=old", "-n", "a", "--dry-run=false", "--journal="+journal)
	t.Logf("renumber -n a:\n%s%s", out, errOut)
	if code != 2 || !strings.Contains(out, "4 Services moved out of ServiceCIDR old") || !strings.Contains(out, "verified") {
		t.Fatalf("renumber -n a: exit %d, want 2 (a/fin left), 4 moved and verified", code)
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("the journal of a finished run is still there (%v)", err)
	}
	after := listServices(ctx, t, c)
	moved := map[string]corev1.Service{}
	for _, key := range []string{"a/single", "a/dual4", "a/dual6", "a/np"} {
		moved[key] = before[key]
	}
	checkMoved(t, moved, after, netip.MustParsePrefix("10.1.0.0/24"))
	for _, key := range []string{"a/fin", "a/stays", "b/other"} {
		if after[key].UID != before[key].UID {
			t.Errorf("%s was re-created, want it untouched", key)
		}
	}
	if got, had := after["a/np"].Spec.Ports[0].NodePort, before["a/np"].Spec.Ports[0].NodePort; got != had {
		t.Errorf("a/np: nodePort %d, had %d", got, had)
	}
	for key, want := range map[string][]string{
		"a/single": {"10.96.0.10"},
		"a/dual4":  {"10.96.0.11", "fd00:96::11"},
		"a/dual6":  {"fd00:96::12", "10.96.0.12"},
		"a/np":     {"10.96.0.13"},
	} {
		if got := after[key].Spec.ClusterIPs; !slices.Equal(got, want) {
			t.Errorf("%s: clusterIPs %v, want %v (the static-band offsets kept)", key, got, want)
		}
	}

	// --to: into a manual-only ServiceCIDR, which takes only static
	// requests, as renumber makes them.
	createServiceCIDR(ctx, t, c, "new", "10.2.0.0/24")
	patch := []byte(`{"metadata":{"annotations":{"` + lifecycle.ManualOnlyAnnotation + `":"true"}}}`)
	if _, err := c.NetworkingV1().ServiceCIDRs().Patch(ctx, "new", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServed(ctx, t, c, "10.2.0.200")
	// A ServiceCIDR scoped to another namespace: the dry run of the
	// re-create is refused, and the Service is left where it is.
	createServiceCIDR(ctx, t, c, "scoped", "10.3.0.0/24")
	patch = []byte(`{"metadata":{"annotations":{"scope.allocator.github.io/namespace-selector":"kubernetes.io/metadata.name=nobody"}}}`)
	if _, err := c.NetworkingV1().ServiceCIDRs().Patch(ctx, "scoped", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 10*time.Second, "the server applies the scope", func() (bool, error) {
		out, _, _ := runCLI(ctx, "renumber", kube, "--from=old", "-n", "b", "--to=scoped", "--journal="+journal)
		return strings.Contains(out, "b/other left: the API refuses its re-create") && strings.Contains(out, "scoped to other Services"), nil
	})
	out, _, code = runCLI(ctx, "renumber", kube, "--from=old", "-n", "b", "--to=new", "--journal="+journal)
	if row := regexp.MustCompile(`(?m)^b\s+other\s+10\.1\.0\.15\s+10\.2\.0\.15\s+would move$`); code != 0 || !row.MatchString(out) {
		t.Errorf("dry run --to new: exit %d, want 0 and %s:\n%s", code, row, out)
	}
	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=old", "-n", "b", "--to=new", "--dry-run=false", "--journal="+journal, "-o", "json")
	if code != 0 || !strings.Contains(out, `"verified": true`) {
		t.Fatalf("renumber -n b --to new: exit %d:\n%s%s", code, out, errOut)
	}
	if other := listServices(ctx, t, c)["b/other"]; other.Spec.ClusterIP != "10.2.0.15" {
		t.Errorf("b/other got %s, want 10.2.0.15: 10.1.0.15's static-band offset in --to new (10.2.0.0/24)", other.Spec.ClusterIP)
	}
}

// TestRenumberResumesJournal: a journal as a kill leaves it, with one
// Service deleted (its delete answered) and not re-created, and one
// journalled and never deleted.
// A dry run names the deleted one (exit 2); the real run re-creates it from
// the journal with a new address, moves the other one as usual, verifies,
// and removes the journal.
func TestRenumberResumesJournal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startWithOld(ctx, t, "10.96.0.0/24")
	c := s.Client
	for i, name := range []string{"deleted", "journalled"} {
		svc := service(metav1.NamespaceDefault, name, corev1.ServiceTypeNodePort, []string{fmt.Sprintf("10.1.0.%d", 20+i)})
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drain(ctx, t, c, "old", "10.1.0.201")
	before := listServices(ctx, t, c)
	delete(before, "default/kubernetes")

	// The killed run's delete of "deleted" was answered.
	path := journalAsKillLeaves(t, before, "10.1.0.0/24", "deleted")
	if err := c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	kube := "--kubeconfig=" + s.KubeconfigPath
	out, errOut, code := runCLI(ctx, "renumber", kube, "--from=old", "--journal="+path)
	if want := "default/deleted deleted, not re-created: a killed run deleted it; run without --dry-run"; code != 2 || !strings.Contains(out, want) {
		t.Fatalf("dry run over the journal: exit %d, want 2 and %q:\n%s%s", code, want, out, errOut)
	}
	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=old", "--journal="+path, "--dry-run=false")
	if want := "1 Service moved out of ServiceCIDR old (10.1.0.0/24)"; code != 0 || !strings.Contains(out, want) ||
		!strings.Contains(out, "1 re-created from the journal") || !strings.Contains(out, "verified") {
		t.Fatalf("renumber over the journal: exit %d, want 0, %q, 1 re-created and verified:\n%s%s", code, want, out, errOut)
	}
	checkMoved(t, before, listServices(ctx, t, c), netip.MustParsePrefix("10.1.0.0/24"))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the journal is still there (%v)", err)
	}
}

// journalAsKillLeaves writes a journal as a run killed in the middle of
// moving the Services of before inside drained leaves it: a "deleting"
// entry for each, and a "deleted" one for each of answered (its delete was
// answered). It returns the journal's path.
func journalAsKillLeaves(t *testing.T, before map[string]corev1.Service, drained string, answered ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "renumber.journal")
	j, err := renumber.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	var list []corev1.Service
	for _, svc := range before {
		list = append(list, svc)
	}
	for _, cand := range renumber.Select(list, []netip.Prefix{netip.MustParsePrefix(drained)}) {
		rec, err := renumber.Recreate(cand, nil)
		if err != nil {
			t.Fatal(err)
		}
		entries := []renumber.Entry{{Op: renumber.OpDeleting, Namespace: rec.Namespace, Name: rec.Name, OldUID: cand.Service.UID,
			ResourceVersion: cand.Service.ResourceVersion, Service: rec, ClusterIPs: cand.Service.Spec.ClusterIPs,
			Moved: []string{cand.Service.Spec.ClusterIP}}}
		if slices.Contains(answered, rec.Name) {
			entries = append(entries, renumber.Entry{Op: renumber.OpDeleted, Namespace: rec.Namespace, Name: rec.Name, OldUID: cand.Service.UID})
		}
		if err := j.Record(entries...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
