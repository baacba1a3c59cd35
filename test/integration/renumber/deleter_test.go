package renumber_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/renumber"
)

// TestRenumberResumeLeavesOthersDeletes: a journal as a killed run leaves
// it, over four Services of the draining "old", each gone by the time the
// run is resumed:
//   - ours: the run's delete was answered (OpDeleted); re-created.
//   - doubt: its delete was in flight (no OpDeleted) and it was deleted
//     straight after the read: renumber's delete or another client's look
//     the same. Not re-created, exit 2, kept in the journal; re-created by
//     --recreate-in-doubt.
//   - changed: no OpDeleted, and a client changed it after the read and then
//     deleted it: renumber's conditional delete cannot have. Left deleted.
//   - recreated: the run's delete was answered, the Service was created
//     again (as the killed run's create would have) and a client deleted that
//     one. Left deleted.
func TestRenumberResumeLeavesOthersDeletes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startWithOld(ctx, t, "10.96.0.0/24")
	c := s.Client
	names := []string{"ours", "doubt", "changed", "recreated"}
	for i, name := range names {
		svc := service(metav1.NamespaceDefault, name, corev1.ServiceTypeClusterIP, []string{fmt.Sprintf("10.1.0.%d", 20+i)})
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drain(ctx, t, c, "old", "10.1.0.201")
	before := listServices(ctx, t, c)

	path := journalAsKillLeaves(t, before, "10.1.0.0/24", "ours", "recreated")

	services := c.CoreV1().Services(metav1.NamespaceDefault)
	del := func(name string) {
		t.Helper()
		if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	del("ours")
	del("doubt")
	changed := before["default/changed"]
	changed.Labels["edited"] = "yes"
	if _, err := services.Update(ctx, &changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("changed")
	del("recreated")
	again := service(metav1.NamespaceDefault, "recreated", corev1.ServiceTypeClusterIP, nil)
	if _, err := services.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("recreated")

	kube := "--kubeconfig=" + s.KubeconfigPath
	out, errOut, code := runCLI(ctx, "renumber", kube, "--from=old", "--journal="+path, "--dry-run=false")
	for _, want := range []string{
		"1 re-created from the journal",
		"1 deleted in doubt and not re-created (--recreate-in-doubt)",
		"2 deleted by someone else and left deleted",
		"default/doubt " + string(renumber.InDoubt),
		"default/changed " + string(renumber.LeftDeleted) + ": deleted by someone else after the killed run read it",
		"default/recreated " + string(renumber.LeftDeleted) + ": created again after the killed run's delete",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("resume output lacks %q", want)
		}
	}
	if code != 2 || t.Failed() {
		t.Fatalf("resume: exit %d, want 2:\n%s%s", code, out, errOut)
	}
	exists := func(name string) bool {
		_, err := services.Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}
	for name, want := range map[string]bool{"ours": true, "doubt": false, "changed": false, "recreated": false} {
		if got := exists(name); got != want {
			t.Errorf("after the resume, %s exists: %v, want %v", name, got, want)
		}
	}
	pending, err := renumber.ReadJournal(path)
	if err != nil || len(pending) != 1 || pending[0].Name != "doubt" {
		t.Fatalf("journal after the resume: %v, %v; want default/doubt pending", pending, err)
	}

	out, errOut, code = runCLI(ctx, "renumber", kube, "--from=old", "--journal="+path, "--dry-run=false", "--recreate-in-doubt")
	if code != 0 || !strings.Contains(out, "1 re-created from the journal") {
		t.Fatalf("resume with --recreate-in-doubt: exit %d, want 0 and 1 re-created:\n%s%s", code, out, errOut)
	}
	if !exists("doubt") {
		t.Errorf("doubt was not re-created by --recreate-in-doubt")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the journal is still there (%v)", err)
	}
}
