package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// migrationServer starts a bitmap-model server (its repair off, so nothing
// but the job creates IPAddresses) on 10.0.0.0/16 and stores n Services
// with addresses from 10.0.1.1 on straight into etcd, as the bitmap model
// leaves them: no IPAddress. `migrate --to ipaddress` then has n+1 creates
// to make (the "kubernetes" Service has none either).
func migrationServer(t *testing.T, n int) *testserver.Server {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/16", Model: "bitmap"})
	plantServices(t, srv.Etcd, n)
	return srv
}

func plantServices(t *testing.T, etcd *etcdtest.Etcd, n int) {
	t.Helper()
	ip := netip.MustParseAddr("10.0.1.0")
	var ips []netip.Addr
	for range n {
		ip = ip.Next()
		ips = append(ips, ip)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				name := fmt.Sprintf("svc-%05d", i)
				svc := &corev1.Service{
					TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uuid.NewUUID()),
						CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second))},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[i].String(), ClusterIPs: []string{ips[i].String()},
						Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}}},
				}
				value, err := etcdlayout.Encode(svc)
				if err == nil {
					_, err = etcd.Client().Put(context.Background(), etcdlayout.Layout{}.Service("default", name), string(value))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("plant services: %v", err)
	}
}

// plantedIPAddresses counts the IPAddresses (the planted Services' and the
// "kubernetes" Service's) and fails the test on one that does not reference
// its own Service (a half-done or wrong claim).
func plantedIPAddresses(t *testing.T, srv *testserver.Server) int {
	t.Helper()
	list, err := srv.Client.NetworkingV1().IPAddresses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, obj := range list.Items {
		// svc-i has 10.0.1.0 + i + 1; "kubernetes" has 10.0.0.1.
		a, base := netip.MustParseAddr(obj.Name).As4(), netip.MustParseAddr("10.0.1.0").As4()
		offset := int(binary.BigEndian.Uint32(a[:])) - int(binary.BigEndian.Uint32(base[:])) - 1
		want := fmt.Sprintf("svc-%05d", offset)
		if offset < 0 {
			want = "kubernetes"
		}
		if ref := obj.Spec.ParentRef; ref == nil || ref.Resource != "services" || ref.Namespace != "default" || ref.Name != want {
			t.Errorf("IPAddress %s: parentRef %+v, want services/default/%s", obj.Name, obj.Spec.ParentRef, want)
		}
		n++
	}
	return n
}

// jobProcess is the allocator binary running as a job, its stderr collected.
type jobProcess struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan error
}

func startJob(t *testing.T, bin string, stderr io.Writer, args ...string) *jobProcess {
	t.Helper()
	p := &jobProcess{cmd: exec.Command(bin, args...), stdout: newSyncBuffer(), stderr: newSyncBuffer(), done: make(chan error, 1)}
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	if stderr != nil {
		p.cmd.Stderr = stderr
	}
	if err := startDyingWithTest(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the exit code, failing the test after limit.
func (p *jobProcess) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit):
			return exit.ExitCode()
		default:
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("the job did not exit within %v\nstderr:\n%s", limit, tail(p.stderr.String(), 20))
	}
	return -1
}

var plainProgressLine = regexp.MustCompile(`(?m)^IPAddresses: (\d+)/(\d+) \(\d+\.\d%\), \d+/s, ETA \S+$`)

// TestMigrateProgressOnPipe: with --progress and stderr a pipe (a Job's log)
// the progress is whole lines, no carriage return or escape sequence, ending
// with the done line; without --progress a pipe gets none.
func TestMigrateProgressOnPipe(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	srv := migrationServer(t, 300)
	p := startJob(t, bin, nil, "migrate", "--to", "ipaddress", "--kubeconfig", srv.KubeconfigPath, "--dry-run=false", "--progress")
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, p.stdout, p.stderr)
	}
	stderr := p.stderr.String()
	if strings.ContainsAny(stderr, "\r\x1b") || !regexp.MustCompile(`(?m)^IPAddresses: 301/301 done in \S+\n\z`).MatchString(stderr) {
		t.Errorf("progress on a pipe: %q", stderr)
	}
	p = startJob(t, bin, nil, "migrate", "--to", "ipaddress", "--kubeconfig", srv.KubeconfigPath, "--dry-run=false")
	if code := p.wait(t, 2*time.Minute); code != 0 || p.stderr.String() != "" || !strings.Contains(p.stdout.String(), "0 created, 301 already present") {
		t.Errorf("migrate without --progress on a pipe: exit %d, stderr %q, stdout %q", code, p.stderr, p.stdout)
	}
}

// TestMigrateProgressOnTerminal runs migrate with stderr on a
// pseudo-terminal and no --progress: it shows progress by itself, one line
// redrawn in place (carriage return, the line, erase to its end), and
// finishes the line when done.
func TestMigrateProgressOnTerminal(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	master, slave, err := openPTY()
	if err != nil {
		t.Skip(err)
	}
	defer master.Close()
	srv := migrationServer(t, 1000)
	p := startJob(t, bin, slave, "migrate", "--to", "ipaddress", "--kubeconfig", srv.KubeconfigPath, "--dry-run=false")
	slave.Close() // the child holds it; EOF (EIO) on the master once it exits
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, master)
	}()
	code := p.wait(t, 2*time.Minute)
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the pseudo-terminal was not closed after the job exited")
	}
	out := screen.String()
	if code != 0 {
		t.Fatalf("migrate: exit %d\n%s\n%q", code, p.stdout, out)
	}
	// The tty's output processing turns \n into \r\n.
	if !regexp.MustCompile(`\rIPAddresses: 1001/1001 done in \S+\x1b\[K\r?\n$`).MatchString(out) {
		t.Errorf("the last redraw is not the done line: %q", tail(out, 3))
	}
	redraws := regexp.MustCompile(`\rIPAddresses: \d+/1001 \(\d+\.\d%\), \d+/s, ETA \S+\x1b\[K`).FindAllString(out, -1)
	if len(redraws) == 0 {
		t.Errorf("no redraw before the done line: %q", out)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("progress on a terminal printed %d lines, want the one redrawn line: %q", strings.Count(out, "\n"), out)
	}
}

// TestMigrateSIGINT interrupts a running migration with SIGINT, as Ctrl-C
// does: the job stops within seconds, exits 130, says how far it got and
// which command resumes; every IPAddress it made is whole and references
// its Service; the resumed run finds them present and creates the rest.
func TestMigrateSIGINT(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	const n = 4000
	srv := migrationServer(t, n)
	args := []string{"migrate", "--to", "ipaddress", "--kubeconfig", srv.KubeconfigPath, "--dry-run=false", "--progress"}
	p := startJob(t, bin, nil, args...)
	// The first periodic line (about a second in) says the creates run.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m := plainProgressLine.FindStringSubmatch(p.stderr.String())
		return m != nil && m[1] != "0", nil
	})
	if err != nil {
		t.Fatalf("no progress line with work done: %v\n%s", err, p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := p.wait(t, 30*time.Second)
	t.Logf("exited %d in %v after SIGINT", code, time.Since(start).Round(time.Millisecond))
	stderr := p.stderr.String()
	if code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130 (did it finish first?)\n%s%s", code, p.stdout, stderr)
	}
	m := regexp.MustCompile(`interrupted: (\d+) IPAddresses created, 0 already present, before it stopped; each IPAddress is created whole, so nothing is half-done\.\nTo resume, run the same command again:\n  allocator migrate (.*)\n`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no resume message:\n%s", stderr)
	}
	if want := "--dry-run=false --kubeconfig=" + srv.KubeconfigPath + " --progress=true --to=ipaddress"; m[2] != want {
		t.Errorf("resume command flags %q, want %q", m[2], want)
	}
	reported, _ := strconv.Atoi(m[1])
	made := plantedIPAddresses(t, srv)
	// Creates cut short by the cancellation may have been stored without
	// the job learning it; never fewer than reported.
	if reported == 0 || made < reported || made >= n+1 {
		t.Fatalf("reported %d created, %d exist, of %d: not a part-way stop", reported, made, n)
	}

	resumed := startJob(t, bin, nil, args...)
	if code := resumed.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("resumed migrate: exit %d\n%s%s", code, resumed.stdout, resumed.stderr)
	}
	// A create the server took before the job hung up may still be
	// stored after the count above (the server finishes a write its
	// client left), so the resumed run may find a few more than counted:
	// never fewer, and together with what it creates, every Service.
	rm := regexp.MustCompile(`(\d+) created, (\d+) already present\), 0 problems, verified=true`).FindStringSubmatch(resumed.stdout.String())
	if rm == nil {
		t.Fatalf("resumed migrate: no summary with 0 problems, verified=true in\n%s", resumed.stdout)
	}
	created, _ := strconv.Atoi(rm[1])
	present, _ := strconv.Atoi(rm[2])
	if present < made || created+present != n+1 {
		t.Errorf("resumed migrate: %d created, %d already present; want at least the %d counted present and %d in all\n%s", created, present, made, n+1, resumed.stdout)
	}
	if got := plantedIPAddresses(t, srv); got != n+1 {
		t.Errorf("%d of %d IPAddresses after the resumed run", got, n+1)
	}
}
