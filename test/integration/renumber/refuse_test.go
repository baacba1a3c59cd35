package renumber_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// TestRenumberRefusesBitmap: on a bitmap-model server renumber refuses,
// saying it needs the IPAddress model, detected as status and repair detect
// it: from the maps and replica records in etcd with --etcd-servers, and
// without etcd from the model the server names on the ServiceCIDR
// "kubernetes".
func TestRenumberRefusesBitmap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "bitmap"})
	if _, err := s.Client.CoreV1().Services("default").Create(ctx, service("default", "web", corev1.ServiceTypeClusterIP, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + lifecycle.DrainingAnnotation + `":"true"}}}`)
	if _, err := s.Client.NetworkingV1().ServiceCIDRs().Patch(ctx, "kubernetes", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kube := "--kubeconfig=" + s.KubeconfigPath
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-servers=" + strings.Join(s.Etcd.Endpoints(), ",")}, "error: renumber needs the IPAddress model: this cluster allocates ClusterIPs in the bitmap model"},
		{nil, `error: renumber needs the IPAddress model: this cluster allocates ClusterIPs in the bitmap model, which serves --service-cluster-ip-range only ` +
			`and has no ServiceCIDR to drain (detected: the bitmap model, because no etcd was given, and the ServiceCIDR "kubernetes" says its server allocates in the bitmap model`},
	} {
		args := append([]string{"renumber", kube, "--from=kubernetes", "-A", "--dry-run=false", "--journal=" + filepath.Join(t.TempDir(), "j")}, tc.args...)
		_, errOut, code := runCLI(ctx, args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if svc, err := s.Client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err != nil || svc.Spec.ClusterIP == "" {
		t.Errorf("web after the refusals: %v", err)
	}
}

// TestRenumberInterrupted: a run whose context is cancelled (Ctrl-C) in
// the middle stops between two Services: it exits 130, says how to resume,
// leaves no Service deleted (the moves it started finish, the journalled
// ones not started are settled as not deleted) and no journal pending; the
// same command then finishes.
func TestRenumberInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/22", Model: "ipaddress"})
	c := s.Client
	createServiceCIDR(ctx, t, c, "old", "10.1.0.0/24")
	waitServed(ctx, t, c, "10.1.0.250")
	createNamespace(ctx, t, c, "a")
	for i := range 200 {
		ip := "10.1.0." + itoa(i+10)
		if _, err := c.CoreV1().Services("a").Create(ctx, service("a", "svc-"+itoa(i), corev1.ServiceTypeClusterIP, []string{ip}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drain(ctx, t, c, "old", "10.1.0.251")
	before := listServices(ctx, t, c)

	journal := filepath.Join(t.TempDir(), "renumber.journal")
	args := []string{"renumber", "--kubeconfig=" + s.KubeconfigPath, "--from=old", "-n", "a", "--dry-run=false", "--batch=20", "--journal=" + journal}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		defer stop()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if data, _ := os.ReadFile(journal); strings.Count(string(data), `"op":"deleting"`) >= 60 {
				return
			}
		}
	}()
	_, errOut, code := runCLI(runCtx, args...)
	if code != 130 || !strings.Contains(errOut, "interrupted: ") || !strings.Contains(errOut, "To resume, run the same command again:") {
		t.Fatalf("interrupted renumber: exit %d, want 130 and the resume hint:\n%s", code, errOut)
	}
	mid := listServices(ctx, t, c)
	for key := range before {
		if _, ok := mid[key]; !ok {
			t.Errorf("%s is missing after the interrupt", key)
		}
	}
	if pending, err := renumber.ReadJournal(journal); err != nil || len(pending) > 0 {
		t.Errorf("journal after the interrupt: %d pending (%v), want none", len(pending), err)
	}
	out, errOut, code := runCLI(ctx, args...)
	if code != 0 || !strings.Contains(out, "verified") {
		t.Fatalf("the resumed renumber: exit %d:\n%s%s", code, tail(out, 5), errOut)
	}
	delete(before, "default/kubernetes")
	after := listServices(ctx, t, c)
	checkMoved(t, before, after, mustPrefix("10.1.0.0/24"))
}
