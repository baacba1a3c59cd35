package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/embedetcd"
)

// embeddedServer is `allocator serve` run as a process on its own embedded
// etcd, as an operator runs it.
type embeddedServer struct {
	cmd        *exec.Cmd
	dataDir    string
	kubeconfig string
	client     kubernetes.Interface
	log        *syncBuffer
	done       chan error
	// etcdFlags are the flags serve printed for repair and migrate.
	etcdFlags []string
}

// syncBuffer collects a process's output for reading while it runs.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

var etcdFlagsLine = regexp.MustCompile(`(?m)^\s*(--etcd-servers \S+ --etcd-cafile \S+ --etcd-certfile \S+ --etcd-keyfile \S+)\s*$`)

// startEmbedded starts serve on a fresh data dir (or dataDir) and waits until
// it is ready and has printed the etcd flags.
func startEmbedded(t *testing.T, bin, dataDir string, args ...string) *embeddedServer {
	t.Helper()
	if dataDir == "" {
		dataDir = filepath.Join(t.TempDir(), "data")
	}
	s := &embeddedServer{dataDir: dataDir, kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), log: newSyncBuffer(), done: make(chan error, 1)}
	s.cmd = exec.Command(bin, append([]string{"serve", "--data-dir", dataDir, "--secure-port", "0"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t, 30*time.Second) })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			s.done <- err
			return false, errors.New("serve exited")
		default:
		}
		m := etcdFlagsLine.FindStringSubmatch(s.log.String())
		if m == nil {
			return false, nil
		}
		s.etcdFlags = strings.Fields(m[1])
		cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
		if err != nil {
			return false, nil
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, nil
		}
		if _, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return false, nil
		}
		s.client = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("allocator serve not ready: %v\n%s", err, tail(s.log.String(), 30))
	}
	return s
}

// stop sends SIGTERM and waits at most limit; it reports how long the exit
// took and the exit error. A process still running after limit is killed.
func (s *embeddedServer) stop(t *testing.T, limit time.Duration) (time.Duration, error, bool) {
	start := time.Now()
	if s.cmd.ProcessState != nil {
		return 0, nil, true
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return time.Since(start), err, true
	case <-time.After(limit):
		_ = s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
		return time.Since(start), err, false
	}
}

func (s *embeddedServer) flag(name string) string {
	for i, f := range s.etcdFlags {
		if f == name && i+1 < len(s.etcdFlags) {
			return s.etcdFlags[i+1]
		}
	}
	return ""
}

// TestEmbeddedEtcdRequiresClientCertificate: the embedded etcd once listened
// in plain http without authentication, so any local process could read and
// rewrite every key around the API's authentication. Now a client without
// the generated client certificate cannot read a key, while the server and
// the repair/migrate jobs (with the flags serve prints) work.
func TestEmbeddedEtcdRequiresClientCertificate(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--allocator", "bitmap", "--service-cluster-ip-range", "10.0.0.0/24")
	ctx := context.Background()
	if _, err := s.client.CoreV1().Services("default").Create(ctx, newService("web"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the server cannot use its etcd: %v", err)
	}
	endpoint := s.flag("--etcd-servers")
	if !strings.HasPrefix(endpoint, "https://127.0.0.1:") {
		t.Fatalf("etcd endpoint %q is not https on loopback", endpoint)
	}
	const key = "/registry/ranges/serviceips"

	caPEM, err := os.ReadFile(s.flag("--etcd-cafile"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for name, cfg := range map[string]clientv3.Config{
		"plain http":                    {Endpoints: []string{"http://" + strings.TrimPrefix(endpoint, "https://")}},
		"TLS without client cert":       {Endpoints: []string{endpoint}, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		"TLS, unverified, without cert": {Endpoints: []string{endpoint}, TLS: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // the point is the missing client certificate
	} {
		cfg.DialTimeout, cfg.Logger = 3*time.Second, zap.NewNop()
		c, err := clientv3.New(cfg)
		if err != nil {
			continue // refused at connect: fine
		}
		getCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := c.Get(getCtx, key)
		cancel()
		c.Close()
		if err == nil {
			t.Errorf("%s: read %s without the client certificate (%d kvs)", name, key, len(resp.Kvs))
		}
	}

	// The jobs reach it with exactly the flags serve printed.
	args := append([]string{"repair", "--kubeconfig", s.kubeconfig, "-o", "json"}, s.etcdFlags...)
	if out, code := runJob(t, bin, args...); code != 0 || !strings.Contains(out, `"model": "bitmap"`) {
		t.Fatalf("repair with the printed flags: exit %d\n%s", code, out)
	}
	args = append([]string{"migrate", "--to", "ipaddress", "--kubeconfig", s.kubeconfig}, s.etcdFlags...)
	// The bitmap-model server keeps the IPAddresses itself, so the dry run
	// finds them present (or, racing its repair, some still to create).
	if out, code := runJob(t, bin, args...); code != 0 || !strings.Contains(out, "2 services, 2 addresses") {
		t.Fatalf("migrate with the printed flags: exit %d\n%s", code, out)
	}
	// The PKI is private to the data dir's owner.
	for _, path := range []string{s.dataDir, filepath.Dir(s.flag("--etcd-keyfile"))} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", path, st.Mode().Perm(), err)
		}
	}
}

func newService(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
}

// TestSecondServeOnSameDataDir: a second serve on a data dir in use once
// printed nothing and waited forever on etcd's file lock, deaf to signals.
func TestSecondServeOnSameDataDir(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	var out bytes.Buffer
	second := exec.CommandContext(ctx, bin, "serve", "--data-dir", s.dataDir, "--secure-port", "0")
	second.Stdout, second.Stderr = &out, &out
	err := second.Run()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("second serve: %v after %v, want exit 1\n%s", err, took, out.String())
	}
	if took > 10*time.Second {
		t.Errorf("second serve took %v to give up", took)
	}
	want := "is used by another allocator serve (pid " + strconv.Itoa(s.cmd.Process.Pid) + ")"
	if !strings.Contains(out.String(), want) {
		t.Errorf("second serve output lacks %q:\n%s", want, out.String())
	}
	// The first one is unharmed.
	if _, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background()); err != nil {
		t.Errorf("first server after the attempt: %v", err)
	}
}

// TestShutdownWithOpenWatch: SIGTERM once took the whole 60 s shutdown
// timeout whenever a watch was open (3 s without), beyond a kubelet's 30 s
// grace period. A watch is opened with client-go, then the server must exit
// cleanly within 10 s.
func TestShutdownWithOpenWatch(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := s.client.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The watch is established: an event arrives for a new Service.
	if _, err := s.client.CoreV1().Services("default").Create(ctx, newService("watched"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ResultChan():
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	took, err, exited := s.stop(t, 30*time.Second)
	t.Logf("exit %v after SIGTERM with a watch open", took)
	if !exited || took > 10*time.Second {
		t.Fatalf("server took %v to stop with an open watch (exited=%v)\n%s", took, exited, tail(s.log.String(), 20))
	}
	if err != nil {
		t.Fatalf("server exit: %v\n%s", err, tail(s.log.String(), 20))
	}
	if strings.Contains(s.log.String(), "Failed to shutdown server") {
		t.Errorf("shutdown hit its deadline:\n%s", tail(s.log.String(), 20))
	}
}

// TestAnonymousProbesOnly: kubelet probes and load balancers call /livez,
// /readyz, /healthz and /version without credentials (they once got 401);
// every other path must still refuse anonymous requests with 401.
func TestAnonymousProbesOnly(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "")
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/healthz", 200}, {"GET", "/livez", 200}, {"GET", "/readyz", 200}, {"GET", "/readyz?verbose", 200},
		{"GET", "/readyz/etcd", 200}, {"GET", "/version", 200},
		{"GET", "/api/v1/services", 401}, {"GET", "/api/v1/namespaces/default/services/kubernetes", 401},
		{"GET", "/apis/networking.k8s.io/v1/ipaddresses", 401}, {"GET", "/metrics", 401}, {"GET", "/openapi/v2", 401},
		{"GET", "/api", 401}, {"GET", "/readyz/../api/v1/services", 401}, {"GET", "/version/../api/v1/services", 401},
		{"GET", "/healthz%2f..%2fapi/v1/services", 401}, {"POST", "/readyz", 401}, {"DELETE", "/api/v1/namespaces/default/services/kubernetes", 401},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, cfg.Host+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = tt.path // send the path as written, unnormalised
		if i := strings.IndexByte(tt.path, '?'); i >= 0 {
			req.URL.Opaque, req.URL.RawQuery = tt.path[:i], tt.path[i+1:]
		}
		resp, err := anon.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("anonymous %s %s: HTTP %d, want %d (%s)", tt.method, tt.path, resp.StatusCode, tt.want, body[:n])
		}
		if tt.path == "/version" && (!bytes.Contains(body[:n], []byte(`"gitVersion": "v1.37.`)) || bytes.Contains(body[:n], []byte("$Format"))) {
			t.Errorf("/version: %s", body[:n])
		}
	}
}

// TestUnreachableEtcdFailsFast: repair and migrate on an etcd that does not
// answer once retried for 10+ minutes; they must fail within seconds with
// one line naming the endpoint.
func TestUnreachableEtcdFailsFast(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	port, err := embedetcd.FreePort(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"repair", "--kubeconfig", kubeconfig, "--etcd-servers", endpoint},
		{"migrate", "--to", "bitmap", "--kubeconfig", kubeconfig, "--etcd-servers", endpoint},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s: %v after %v, want exit 1", args[0], err, took)
		}
		if took > 15*time.Second {
			t.Errorf("%s took %v to give up", args[0], took)
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], endpoint) {
			t.Errorf("%s: stderr is not one line naming %s:\n%s", args[0], endpoint, stderr.String())
		}
	}
}

// TestStartupLogs: -v is accepted (it was refused: "unknown shorthand flag:
// 'v'"), and a start and stop of the real binary print one log format: no
// zap JSON lines from etcd between klog's text lines, no "resyncPeriod is
// invalid" warning, and no error-level line.
func TestStartupLogs(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "-v", "2")
	if _, err := s.client.CoreV1().Services("default").Create(context.Background(), newService("logged"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The start-up's end is logged beside /readyz's first success, not
	// before it: waited for here, so that the stop does not race it (the
	// line is required below).
	waitStartupOver(s.log.String, 10*time.Second)
	if _, err, exited := s.stop(t, 30*time.Second); !exited || err != nil {
		t.Fatalf("stop: exited=%v err=%v", exited, err)
	}
	out := s.log.String()
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "{"):
			t.Errorf("JSON line among the text logs: %s", line)
		case strings.Contains(line, "resyncPeriod is invalid"):
			t.Errorf("resync warning: %s", line)
		case strings.Contains(line, `"Failed to watch"`) && strings.Contains(line, "context canceled"):
			// client-go's default watch error handler logs a watch whose
			// request was cancelled by the stop itself (a re-watch racing
			// the informers' context on a loaded machine); not a fault.
		case len(line) > 1 && line[0] == 'E' && line[1] >= '0' && line[1] <= '9':
			t.Errorf("error-level line on a normal start and stop: %s", line)
		}
	}
	if !strings.Contains(out, "Bootstrap done") {
		t.Errorf("no klog output at -v 2?\n%s", tail(out, 20))
	}
	for _, want := range []string{`"Embedded etcd serving" took=`, startupOverLine + " took="} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s line in the log of a start:\n%s", want, tail(out, 20))
		}
	}

	// Started again, the server finds default/kubernetes stored and keeps
	// it: a second create of it would be refused as taking its own address
	// (as on kube-apiserver), which must not be what the bootstrap does.
	again := startEmbedded(t, bin, s.dataDir, "-v", "2")
	if _, err, exited := again.stop(t, 30*time.Second); !exited || err != nil {
		t.Fatalf("stop after restart: exited=%v err=%v", exited, err)
	}
	if log := again.log.String(); strings.Contains(log, "Cannot create the default/kubernetes Service") {
		t.Errorf("the restarted server tried to create default/kubernetes again:\n%s", tail(log, 20))
	}
}
