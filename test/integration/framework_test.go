package integration

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/apiserver"
)

// server is one running allocator API server.
type server struct {
	client     kubernetes.Interface
	restConfig *rest.Config
	etcd       *etcdtest.Etcd
	dataDir    string
	stop       func()
}

type serverOptions struct {
	serviceRange string
	etcd         *etcdtest.Etcd // nil: a new one
	dataDir      string         // "": a new temp dir
	model        string         // --allocator; "": bitmap
	// newAllocator overrides the allocator factory.
	newAllocator apiserver.AllocatorFactory
	// rebuild sets Config.RebuildAllocations.
	rebuild bool
	// noWait returns before the server is ready.
	noWait bool
}

// models are the allocator models every allocation test runs with.
var models = []string{apiserver.ModelBitmap, apiserver.ModelIPAddress}

// forEachModel runs test once per allocator model.
func forEachModel(t *testing.T, test func(t *testing.T, model string)) {
	for _, model := range models {
		t.Run(model, func(t *testing.T) { test(t, model) })
	}
}

// startServer starts a server and waits until /readyz is ok. It is stopped
// on cleanup (or earlier with stop).
func startServer(t *testing.T, so serverOptions) *server {
	t.Helper()
	if so.etcd == nil {
		so.etcd = etcdtest.New(t)
	}
	if so.dataDir == "" {
		so.dataDir = t.TempDir()
	}
	opts := apiserver.NewOptions()
	opts.SecurePort = 0
	opts.DataDir = filepath.Join(so.dataDir, "data")
	if so.serviceRange != "" {
		opts.ServiceClusterIPRange = so.serviceRange
	}
	opts.EtcdServers = so.etcd.Endpoints()
	if so.model != "" {
		opts.Allocator = so.model
	}
	cfg, err := opts.Config(nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if so.newAllocator != nil {
		cfg.NewAllocator = so.newAllocator
	}
	cfg.RebuildAllocations = so.rebuild
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server stopped with error: %v", err)
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
	if !so.noWait {
		waitReady(t, client)
	}
	return &server{client: client, restConfig: restConfig, etcd: so.etcd, dataDir: so.dataDir, stop: stop}
}

func waitReady(t *testing.T, client kubernetes.Interface) {
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
		// The kubernetes Service exists once bootstrap is done.
		_, err = client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		last = err
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("server not ready: %v (last: %v)", err, last)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
