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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// TestReplaceDefaultRange follows docs/operations.md's "Replacing the default
// range" on a server whose --service-cluster-ip-range moves from
// 10.96.0.0/24 to 10.100.0.0/24: add ServiceCIDR "new" with the new range,
// drain "kubernetes", renumber every Service (default/kubernetes is left
// and named, exit 0), restart the server on the same etcd with the new
// flag, delete default/kubernetes (the server re-creates it on 10.100.0.1),
// delete the emptied ServiceCIDR "kubernetes" (the server re-creates it
// from the new flag, open), and create a Service.
func TestReplaceDefaultRange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress", Etcd: etcd})
	c := s.Client
	createNamespace(ctx, t, c, "app")
	for _, name := range []string{"web", "db", "cache"} {
		if _, err := c.CoreV1().Services("app").Create(ctx, service("app", name, corev1.ServiceTypeClusterIP, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createServiceCIDR(ctx, t, c, "new", "10.100.0.0/24")
	waitServed(ctx, t, c, "10.100.0.200")
	drain(ctx, t, c, "kubernetes", "10.96.0.200")
	before := listServices(ctx, t, c)
	delete(before, "default/kubernetes")

	out, errOut, code := runCLI(ctx, "renumber", "--kubeconfig="+s.KubeconfigPath, "--from=kubernetes", "-A", "--dry-run=false", "--journal="+t.TempDir()+"/j")
	note := `(?m)^default/kubernetes left: the API server's own Service: it is re-created at the first address of --service-cluster-ip-range`
	if code != 0 || !strings.Contains(out, "3 Services moved") || !regexp.MustCompile(note).MatchString(out) {
		t.Fatalf("renumber --from kubernetes: exit %d, want 0 with 3 moved and default/kubernetes named:\n%s%s", code, out, errOut)
	}
	checkMoved(t, before, listServices(ctx, t, c), netip.MustParsePrefix("10.96.0.0/24"))

	// The servers restart with the new range; the stored default ServiceCIDR
	// and default/kubernetes stay as they were.
	s.Stop()
	s = testserver.Start(t, testserver.Options{ServiceRange: "10.100.0.0/24", Model: "ipaddress", Etcd: etcd})
	c = s.Client
	if err := c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, time.Minute, "default/kubernetes re-created on 10.100.0.1", func() (bool, error) {
		svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && svc.Spec.ClusterIP == "10.100.0.1", err
	})
	out, _, code = runCLI(ctx, "status", "--kubeconfig="+s.KubeconfigPath)
	if want := "ServiceCIDR/kubernetes 10.96.0.0/24 is draining: no Service holds an address in it"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("allocator status: exit %d, want %q:\n%s", code, want, out)
	}
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 2*time.Minute, "ServiceCIDR kubernetes re-created from the new flag", func() (bool, error) {
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && slices.Equal(sc.Spec.CIDRs, []string{"10.100.0.0/24"}) && sc.DeletionTimestamp == nil &&
			sc.Annotations[lifecycle.DrainingAnnotation] == "", err
	})
	svc, err := c.CoreV1().Services("app").Create(ctx, service("app", "later", corev1.ServiceTypeClusterIP, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip := netip.MustParseAddr(svc.Spec.ClusterIP); !netip.MustParsePrefix("10.100.0.0/24").Contains(ip) {
		t.Errorf("a Service created after the replacement got %s, want an address of 10.100.0.0/24", ip)
	}
}
