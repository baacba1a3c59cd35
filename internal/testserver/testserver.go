// Package testserver starts the project's real API server in-process for
// tests: embedded etcd on loopback, HTTPS, token auth, and a client-go
// clientset built from the admin kubeconfig the server writes. Everything is
// stopped and removed on test cleanup.
package testserver

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
)

// Options choose what to start. The zero value is a single-stack bitmap-model
// server on a fresh etcd with the default service range.
type Options struct {
	// ServiceRange is --service-cluster-ip-range ("" keeps the default).
	ServiceRange string
	// Model is --allocator ("" keeps the default).
	Model string
	// Etcd is the etcd to use, reached over gRPC at its client URL; nil
	// starts a new one that the server calls in process, as `allocator
	// serve` calls its embedded etcd (so a test sharing it with a second
	// server has one of each).
	Etcd *etcdtest.Etcd
	// EtcdPrefix is --etcd-prefix ("" keeps the default).
	EtcdPrefix string
	// WithRepair runs the server's own repair controller and start-up
	// carry-over; by default they are off so tests of those drive them.
	WithRepair bool
	// DataDir is the server's data directory; "" is a new temporary one.
	// Reuse a stopped server's DataDir to restart it on the same data.
	DataDir string
	// WrapAllocator, if set, wraps each family's allocator (a test slows it
	// down, holds it unready, watches its releases); the model itself, its
	// stores and repairs are the production ones.
	WrapAllocator func(allocation.Interface) allocation.Interface
	// Configure adjusts the server's Config before it is completed (an
	// allocator factory, rebuild on start, ...).
	Configure func(*apiserver.Config)
	// NoWait returns as soon as the server runs, before it is ready.
	NoWait bool
	// Flags adjusts the command-line options after the ones above are set
	// (serving certificate, authentication, audit, etcd TLS, ...).
	Flags func(*apiserver.Options)
}

// Server is one running API server.
type Server struct {
	Client         kubernetes.Interface
	RESTConfig     *rest.Config
	Etcd           *etcdtest.Etcd
	DataDir        string
	KubeconfigPath string
	// Started is the server's Started: closed once its start-up is over.
	Started <-chan struct{}
	stop    func()
	run     *runState
}

// runState is how the server's Run ended.
type runState struct {
	exited   chan struct{} // closed when Run returned
	err      error         // what Run returned; read after exited
	expected atomic.Bool   // the test read err through WaitExit: not a failure
}

// WaitExit waits until the server stops on its own, at most timeout, and
// returns what Run returned; exited is false if it still runs. A test that
// expects the server to stop (etcd restored under it) reads the error here,
// and the cleanup then does not report it.
func (s *Server) WaitExit(timeout time.Duration) (exited bool, err error) {
	select {
	case <-s.run.exited:
		s.run.expected.Store(true)
		return true, s.run.err
	case <-time.After(timeout):
		return false, nil
	}
}

// Stop stops the server (it is also stopped on cleanup).
func (s *Server) Stop() { s.stop() }

// Start starts a server and waits until it is ready and bootstrapped.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	inProcess := o.Etcd == nil
	if inProcess {
		o.Etcd = etcdtest.New(t)
	}
	if o.DataDir == "" {
		o.DataDir = filepath.Join(t.TempDir(), "data")
	}
	opts := apiserver.NewOptions()
	opts.SecurePort = 0
	opts.DataDir = o.DataDir
	opts.EtcdServers = o.Etcd.Endpoints()
	if o.ServiceRange != "" {
		opts.ServiceClusterIPRange = o.ServiceRange
	}
	if o.Model != "" {
		opts.Allocator = o.Model
	}
	if o.EtcdPrefix != "" {
		opts.EtcdPrefix = o.EtcdPrefix
	}
	if o.Flags != nil {
		o.Flags(opts)
		// Flags pointing the server at another etcd: it goes there over gRPC.
		inProcess = inProcess && slices.Equal(opts.EtcdServers, o.Etcd.Endpoints())
	}
	cfg, err := opts.Config(nil)
	if err != nil {
		t.Fatalf("server config: %v", err)
	}
	if inProcess {
		cfg.InProcessEtcd = o.Etcd
	}
	cfg.ManualRepair = !o.WithRepair
	cfg.WrapAllocator = o.WrapAllocator
	if o.Configure != nil {
		o.Configure(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	run := &runState{exited: make(chan struct{})}
	go func() {
		run.err = srv.Run(ctx)
		close(run.exited)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-run.exited:
			if run.err != nil && !run.expected.Load() {
				t.Errorf("server stopped with error: %v", run.err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("server did not stop within 60s")
		}
	}
	t.Cleanup(stop)

	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	restConfig.QPS, restConfig.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if !o.NoWait {
		WaitReady(t, client)
	}
	return &Server{Client: client, RESTConfig: restConfig, Etcd: o.Etcd, DataDir: o.DataDir, KubeconfigPath: cfg.KubeconfigPath, Started: srv.Started(), stop: stop, run: run}
}

// WaitReady waits until /readyz is ok and the kubernetes Service exists.
func WaitReady(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = errors.Join(err, errors.New(string(body)))
			return false, nil
		}
		_, err = client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		last = err
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("server not ready: %v (last: %v)", err, last)
	}
}
