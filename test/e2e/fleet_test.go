package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/etcdtest"
)

// fleet is a set of `allocator serve` processes (replicas) on one etcd, each
// of which can be stopped and started again with another --allocator, the
// way an operator switches models replica by replica. A replica keeps its
// data directory (certificate, admin token) across restarts; its port and
// process change.
type fleet struct {
	t        *testing.T
	bin      string
	etcd     *etcdtest.Etcd
	args     []string // extra serve flags for every replica
	replicas []*replica
}

// replica is one slot of the fleet.
type replica struct {
	name    string
	dataDir string

	mu   sync.Mutex
	proc *process // the current process; guarded by mu

	// serving is the replica's endpoint while it is ready and not being
	// stopped; nil otherwise. The load generator sends requests only to
	// serving replicas.
	serving atomic.Pointer[endpoint]
	// inFlight counts the load's requests to the replica not answered yet.
	inFlight atomic.Int32
}

// endpoint is a ready replica process as a client sees it.
type endpoint struct {
	replica    *replica
	model      string
	pid        int
	kubeconfig string
	client     kubernetes.Interface
}

func (e *endpoint) String() string {
	return fmt.Sprintf("%s(%s, pid %d)", e.replica.name, e.model, e.pid)
}

// process is one run of `allocator serve`.
type process struct {
	model   string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // Wait's result, set before exited is closed
}

func newFleet(t *testing.T, bin string, etcd *etcdtest.Etcd, n int, args ...string) *fleet {
	f := &fleet{t: t, bin: bin, etcd: etcd, args: args}
	for i := range n {
		f.replicas = append(f.replicas, f.newReplica(fmt.Sprintf("r%d", i+1)))
	}
	return f
}

func (f *fleet) newReplica(name string) *replica {
	return &replica{name: name, dataDir: filepath.Join(f.t.TempDir(), name)}
}

func (f *fleet) endpoints() string { return strings.Join(f.etcd.Endpoints(), ",") }

// launch starts a process for r with model and returns without waiting for
// it to be ready. The process is stopped at the end of the test.
func (f *fleet) launch(r *replica, model string) *process {
	f.t.Helper()
	if err := os.MkdirAll(r.dataDir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	// A kubeconfig left by the previous process names its port; the new
	// process writes its own.
	_ = os.Remove(filepath.Join(r.dataDir, "admin.kubeconfig"))
	logPath := filepath.Join(r.dataDir, fmt.Sprintf("serve-%s-%d.log", model, time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		f.t.Fatal(err)
	}
	args := append([]string{"serve", "--data-dir", r.dataDir, "--secure-port", "0",
		"--etcd-servers", f.endpoints(), "--allocator", model}, f.args...)
	cmd := exec.Command(f.bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := startDyingWithTest(cmd); err != nil {
		logFile.Close()
		f.t.Fatalf("start %s: %v", r.name, err)
	}
	p := &process{model: model, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	f.t.Cleanup(func() { p.stop(syscall.SIGTERM, 30*time.Second) })
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	return p
}

// stop signals the process and waits for it to exit (SIGKILL after timeout).
func (p *process) stop(sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("pid %d did not exit within %s of %s", p.cmd.Process.Pid, timeout, sig)
	}
	return p.err
}

func (p *process) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// start runs r with model and waits until it serves; r then takes load.
func (f *fleet) start(r *replica, model string) *endpoint {
	f.t.Helper()
	p := f.launch(r, model)
	ep, err := f.waitReady(r, p, 90*time.Second)
	if err != nil {
		f.t.Fatalf("%s (%s) not ready: %v\n%s", r.name, model, err, tail(p.log(), 40))
	}
	r.serving.Store(ep)
	return ep
}

// startAll starts every replica with model, the processes at once.
func (f *fleet) startAll(model string) {
	f.t.Helper()
	procs := make([]*process, len(f.replicas))
	for i, r := range f.replicas {
		procs[i] = f.launch(r, model)
	}
	for i, r := range f.replicas {
		ep, err := f.waitReady(r, procs[i], 90*time.Second)
		if err != nil {
			f.t.Fatalf("%s (%s) not ready: %v\n%s", r.name, model, err, tail(procs[i].log(), 40))
		}
		r.serving.Store(ep)
	}
}

// waitReady polls the process's /readyz and the default/kubernetes Service.
func (f *fleet) waitReady(r *replica, p *process, timeout time.Duration) (*endpoint, error) {
	kubeconfig := filepath.Join(r.dataDir, "admin.kubeconfig")
	var ep *endpoint
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("exited: %v", p.err)
		default:
		}
		if _, err := os.Stat(kubeconfig); err != nil {
			return false, nil
		}
		c, err := newClient(kubeconfig)
		if err != nil {
			return false, nil
		}
		if _, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return false, nil
		}
		if _, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		ep = &endpoint{replica: r, model: p.model, pid: p.cmd.Process.Pid, kubeconfig: kubeconfig, client: c}
		return true, nil
	})
	return ep, err
}

// newClient is a client-go client for a replica: no client-side throttling
// (the load generator paces itself), and a timeout so a request to a killed
// replica ends.
func newClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// stop stops r's process with sig. A SIGTERM is a clean stop: r leaves the
// load first (as behind a load balancer that drains it) and must exit 0. A
// SIGKILL is a crash: requests keep going to r until it is dead, so some
// are in flight when it dies and their answers are lost.
func (f *fleet) stop(r *replica, sig syscall.Signal) {
	f.t.Helper()
	if sig != syscall.SIGKILL {
		r.serving.Store(nil)
	} else {
		// Kill it with a request in flight when the load offers one
		// within a few seconds, so an answer is really lost.
		deadline := time.Now().Add(5 * time.Second)
		for r.inFlight.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		f.t.Logf("killing %s with %d requests in flight", r.name, r.inFlight.Load())
	}
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	err := p.stop(sig, 30*time.Second)
	r.serving.Store(nil)
	if sig == syscall.SIGTERM && err != nil {
		f.t.Errorf("%s (%s) after SIGTERM: %v\n%s", r.name, p.model, err, tail(p.log(), 30))
	}
}

// livePIDs returns the pids of the replicas' running processes.
func (f *fleet) livePIDs() map[int]string {
	out := map[int]string{}
	for _, r := range f.replicas {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
		default:
			out[p.cmd.Process.Pid] = p.model
		}
	}
	return out
}

// any returns a serving endpoint, preferring the i-th (round robin).
func (f *fleet) pick(i int) *endpoint {
	n := len(f.replicas)
	for k := range n {
		if ep := f.replicas[(i+k)%n].serving.Load(); ep != nil {
			return ep
		}
	}
	return nil
}

// mustPick returns a serving endpoint or fails the test.
func (f *fleet) mustPick() *endpoint {
	f.t.Helper()
	ep := f.pick(0)
	if ep == nil {
		f.t.Fatal("no replica is serving")
	}
	return ep
}

// logs returns the tail of every replica's current log, for failures.
func (f *fleet) logs(lines int) string {
	var b strings.Builder
	for _, r := range f.replicas {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		if p != nil {
			fmt.Fprintf(&b, "--- %s (%s, pid %d) ---\n%s\n", r.name, p.model, p.cmd.Process.Pid, tail(p.log(), lines))
		}
	}
	return b.String()
}

// runCLI runs the allocator binary and returns its standard output, its
// whole output (stdout and stderr interleaved) and its exit code.
func runCLI(t *testing.T, bin string, args ...string) (stdout, output string, code int) {
	t.Helper()
	stdout, output, code = runCLIQuiet(t, bin, args...)
	t.Logf("allocator %s → exit %d\n%s", strings.Join(args, " "), code, tail(output, 12))
	return stdout, output, code
}

// lockedBuffer is a bytes.Buffer written from the stdout and the stderr
// copier of one command at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
