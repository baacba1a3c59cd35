package renumber_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// churn is a client that deletes Services of the range, and deletes and
// creates some again, while renumber runs, is killed and is stopped. It
// records what it did: a Service it deleted last must stay deleted, one it
// created last must exist.
type churn struct {
	c     kubernetes.Interface
	names []string // namespace/name of the Services it may touch
	rng   *rand.Rand

	mu        sync.Mutex
	deleted   map[string]bool // its last successful op on the name was a delete
	recreated map[string]bool // its last successful op was a create
	unknown   map[string]bool // an op whose outcome it does not know: not checked
	ops       int
}

func (ch *churn) run(ctx context.Context, every time.Duration, maxOps int) {
	for ch.ops < maxOps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		ch.op(context.WithoutCancel(ctx), ch.names[ch.rng.IntN(len(ch.names))])
	}
}

// op deletes the Service key, and one time in three creates it again. It
// runs to its end once started (stopping the churn never leaves an op
// unrecorded); an op whose outcome is unknown marks the key unknown.
func (ch *churn) op(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ns, name, _ := strings.Cut(key, "/")
	services := ch.c.CoreV1().Services(ns)
	if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if !apierrors.IsNotFound(err) { // gone already: renumber's delete, or ours
			ch.mark(key, false, false, true)
		}
		return
	}
	ch.mark(key, true, false, false)
	if ch.rng.IntN(3) > 0 {
		return
	}
	again := service(ns, name, corev1.ServiceTypeClusterIP, nil)
	again.Labels["churn"] = "recreated"
	switch _, err := services.Create(ctx, again, metav1.CreateOptions{}); {
	case err == nil:
		ch.mark(key, false, true, false)
	case !apierrors.IsAlreadyExists(err): // AlreadyExists: renumber re-created it first
		ch.mark(key, false, false, true)
	}
}

func (ch *churn) mark(key string, deleted, recreated, unknown bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.ops++
	ch.deleted[key], ch.recreated[key] = deleted, recreated
	if unknown {
		ch.unknown[key] = true
	}
}

// TestRenumberKilledBesideClient: 300 Services of the draining "old" are
// renumbered by the built binary while a client deletes Services of the
// range, and deletes and creates some again. The run is killed (SIGKILL)
// with deletes in flight, the client goes on while it is stopped, then the
// same command resumes it without --recreate-in-doubt. No Service the
// client deleted comes back; every other one exists, or is reported in
// doubt (exit 2, kept in the journal) when the kill caught renumber's delete
// of it in flight; the client's re-created ones exist. A last run with
// --recreate-in-doubt settles the journal, and etcd holds no address twice
// and no IPAddress without its Service.
func TestRenumberKilledBesideClient(t *testing.T) {
	t.Parallel()
	const total = 300
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/20", Model: "ipaddress"})
	c := s.Client
	createServiceCIDR(ctx, t, c, "old", "10.1.0.0/20")
	waitServed(ctx, t, c, "10.1.15.200")
	var names []string
	for i := range total / 100 {
		ns := fmt.Sprintf("race-%d", i)
		createNamespace(ctx, t, c, ns)
		for j := range 100 {
			svc := service(ns, fmt.Sprintf("svc-%d", j), corev1.ServiceTypeClusterIP, []string{fmt.Sprintf("10.1.%d.%d", i, j+10)})
			if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, ns+"/"+svc.Name)
		}
	}
	drain(ctx, t, c, "old", "10.1.15.201")

	ch := &churn{c: c, names: names, rng: rand.New(rand.NewPCG(1, 2)), deleted: map[string]bool{}, recreated: map[string]bool{},
		unknown: map[string]bool{}}
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() { defer close(churned); ch.run(churnCtx, 15*time.Millisecond, 120) }()

	journal := filepath.Join(t.TempDir(), "renumber.journal")
	args := []string{"renumber", "--kubeconfig=" + s.KubeconfigPath, "--from=old", "-A", "--dry-run=false", "--batch=50", "--journal=" + journal}
	journalled := runAndKill(ctx, t, bin, args, journal, 120)
	pending, err := renumber.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the client goes on while renumber is stopped
	stopChurn()
	<-churned

	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if code != 0 && code != 2 {
		t.Fatalf("resume: %v (exit %d)\n%s%s", err, code, tail(out.String(), 20), errOut.String())
	}
	inDoubt := map[string]bool{}
	leftDeleted := 0
	for _, line := range strings.Split(out.String(), "\n") {
		key, rest, _ := strings.Cut(line, " ")
		switch {
		case strings.HasPrefix(rest, string(renumber.InDoubt)):
			inDoubt[key] = true
		case strings.HasPrefix(rest, string(renumber.LeftDeleted)):
			leftDeleted++
		}
	}
	if (code == 2) != (len(inDoubt) > 0) {
		t.Errorf("resume exit %d with %d Services in doubt:\n%s", code, len(inDoubt), tail(out.String(), 20))
	}

	after := listServices(ctx, t, c)
	resurrected, lost := 0, 0
	for _, key := range names {
		_, exists := after[key]
		switch {
		case ch.unknown[key]:
		case ch.deleted[key] && exists:
			resurrected++
			t.Errorf("%s: the client deleted it, and it exists again after the resume", key)
		case ch.recreated[key] && !exists:
			t.Errorf("%s: the client created it again, and it is gone after the resume", key)
		case !ch.deleted[key] && !exists && !inDoubt[key]:
			lost++
			t.Errorf("%s: nobody but renumber deleted it, and it is gone after the resume without being reported in doubt", key)
		}
	}
	t.Logf("kill after %d journalled deletes (%d pending); client: %d ops (%d deletes kept, %d re-created); resume: %d in doubt, %d left deleted, %d resurrected, %d lost",
		journalled, len(pending), ch.ops, count(ch.deleted), count(ch.recreated), len(inDoubt), leftDeleted, resurrected, lost)

	cmd = exec.CommandContext(ctx, bin, append(args, "--recreate-in-doubt")...)
	out.Reset()
	errOut.Reset()
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("last run with --recreate-in-doubt: %v\n%s%s", err, tail(out.String(), 20), errOut.String())
	}
	after = listServices(ctx, t, c)
	for key := range inDoubt {
		if _, ok := after[key]; !ok {
			t.Errorf("%s: in doubt, and not re-created by --recreate-in-doubt", key)
		}
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("the journal of a finished run is still there (%v)", err)
	}
	report, err := invariants.Check(ctx, s.Etcd.Client(), etcdlayout.Layout{}, model.IPAddress)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || len(report.Leaked) > 0 {
		t.Errorf("etcd after the renumber breaks the invariants:\n%s", report)
	}
}

func count(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
