package renumber_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

const (
	namespaces    = 10
	perNamespace  = 100
	killAfter     = 450 // journalled deletes: the first kill comes in the tenth batch of 50
	killDelay     = 50 * time.Millisecond
	killRounds    = 3
	renumberLimit = 3 * time.Minute
)

// TestRenumberKillAndResume: 1,000 Services over 10 namespaces hold
// addresses of ServiceCIDR "old" (every tenth dual-stack, keeping its IPv6
// address); "old" is drained and the built binary renumbers them, batches
// of 50, and is killed (SIGKILL) killDelay after the journal records the
// deletes of its tenth batch, while they run; if no delete was in flight, it
// is run and killed again a batch later (killRounds at most). The same
// command resumes: it re-creates what the killed runs deleted and moves the
// rest. Then every
// Service exists again (same name, labels, annotations, spec apart from its
// moved address), none inside "old", no address twice, and etcd holds an
// IPAddress for every address and none without its Service.
func TestRenumberKillAndResume(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/20,fd00:96::/108", Model: "ipaddress"})
	c := s.Client
	createServiceCIDR(ctx, t, c, "old", "10.1.0.0/20")
	waitServed(ctx, t, c, "10.1.15.200")
	created := time.Now()
	createServices(ctx, t, c)
	t.Logf("%d Services created in %v", namespaces*perNamespace, time.Since(created).Round(time.Millisecond))
	drain(ctx, t, c, "old", "10.1.15.201")
	before := listServices(ctx, t, c)
	delete(before, "default/kubernetes")
	if len(before) != namespaces*perNamespace {
		t.Fatalf("%d Services before the renumber, want %d", len(before), namespaces*perNamespace)
	}

	journal := filepath.Join(t.TempDir(), "renumber.journal")
	args := []string{"renumber", "--kubeconfig=" + s.KubeconfigPath, "--from=old", "-A", "--dry-run=false", "--batch=50", "--journal=" + journal, "--progress"}
	var firstRun time.Duration
	missing := 0
	for round := range killRounds {
		start := time.Now()
		killed := runAndKill(ctx, t, bin, args, journal, killAfter+round*50)
		firstRun += time.Since(start)
		pending, err := renumber.ReadJournal(journal)
		if err != nil {
			t.Fatal(err)
		}
		mid := listServices(ctx, t, c)
		for key := range before {
			if _, ok := mid[key]; !ok {
				missing++
			}
		}
		t.Logf("kill %d after %v: %d journalled deletes, %d entries pending, %d Services deleted and not re-created",
			round+1, time.Since(start).Round(time.Millisecond), killed, len(pending), missing)
		if missing > 0 {
			break
		}
	}
	if missing == 0 {
		t.Logf("no kill caught a delete in flight; TestRenumberResumesJournal covers that case deterministically")
	}

	// Nothing but renumber deletes here, so a delete in flight at a kill
	// was renumber's: --recreate-in-doubt re-creates those too.
	// TestRenumberKilledBesideClient resumes without it.
	cmd := exec.CommandContext(ctx, bin, append(args, "--recreate-in-doubt")...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	resumeStart := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("resume: %v\n%s%s", err, tail(out.String(), 20), errOut.String())
	}
	resumeRun := time.Since(resumeStart)
	summary := lastLine(out.String())
	t.Logf("resume: %s", summary)
	m := regexp.MustCompile(`^(\d+) Services moved .*?(?:; (\d+) re-created from the journal)?;.*verified$`).FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("resume summary %q: want N Services moved and verified", summary)
	}
	moved, _ := strconv.Atoi(m[1])
	resumed, _ := strconv.Atoi(m[2])
	if resumed < missing {
		t.Errorf("the resume re-created %d Services from the journal, want the %d the kill left deleted", resumed, missing)
	}
	total := namespaces * perNamespace
	t.Logf("rate: %d Services in %v before the kills and %v for the resume (%d moved, %d from the journal): %.0f Services/s",
		total, firstRun.Round(time.Millisecond), resumeRun.Round(time.Millisecond), moved, resumed, float64(total)/(firstRun+resumeRun).Seconds())
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("the journal of a finished run is still there (%v)", err)
	}

	after := listServices(ctx, t, c)
	checkMoved(t, before, after, netip.MustParsePrefix("10.1.0.0/20"))
	report, err := invariants.Check(ctx, s.Etcd.Client(), etcdlayout.Layout{}, model.IPAddress)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || len(report.Leaked) > 0 {
		t.Errorf("etcd after the renumber breaks the invariants:\n%s", report)
	}
}

// createServices creates the Services with addresses of "old":
// namespace i's Service j holds 10.1.i.(j+10); every tenth is dual-stack.
func createServices(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	work := make(chan *corev1.Service)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for svc := range work {
				if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create %s/%s: %w", svc.Namespace, svc.Name, err):
					default:
					}
				}
			}
		})
	}
	for i := range namespaces {
		ns := fmt.Sprintf("team-%d", i)
		createNamespace(ctx, t, c, ns)
		for j := range perNamespace {
			ip := fmt.Sprintf("10.1.%d.%d", i, j+10)
			svc := service(ns, fmt.Sprintf("svc-%d", j), corev1.ServiceTypeClusterIP, []string{ip})
			if j%10 == 0 {
				svc = service(ns, fmt.Sprintf("svc-%d", j), corev1.ServiceTypeClusterIP, []string{ip}, v4, v6)
			}
			work <- svc
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// runAndKill runs the binary and kills it (SIGKILL) killDelay after the
// journal holds at least after "deleting" entries; it returns how many it
// held then.
func runAndKill(ctx context.Context, t *testing.T, bin string, args []string, journal string, after int) int {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(renumberLimit)
	for {
		select {
		case err := <-done:
			t.Fatalf("renumber ended before the kill (%v):\n%s", err, out.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("renumber did not journal %d deletes within %v:\n%s", after, renumberLimit, out.String())
		case <-time.After(2 * time.Millisecond):
		}
		data, _ := os.ReadFile(journal)
		if n := bytes.Count(data, []byte(`"op":"deleting"`)); n >= after {
			time.Sleep(killDelay)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-done
			return n
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
