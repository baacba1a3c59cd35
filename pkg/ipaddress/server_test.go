package ipaddress_test

import (
	"context"
	"errors"
	"net/http"
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
	"github.com/allocator/allocator/pkg/ipaddress"
)

// startServer runs the project's API server in-process on a real embedded
// etcd, with serviceRange as its default ServiceCIDR, and returns the admin
// rest config. The server stops on cleanup.
func startServer(t *testing.T, serviceRange string) *rest.Config {
	t.Helper()
	etcd := etcdtest.New(t)
	opts := apiserver.NewOptions()
	opts.SecurePort = 0
	opts.DataDir = filepath.Join(t.TempDir(), "data")
	opts.ServiceClusterIPRange = serviceRange
	opts.EtcdServers = etcd.Endpoints()
	cfg, err := opts.Config(nil)
	if err != nil {
		t.Fatalf("server config: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server stopped with error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("server did not stop within 60s")
		}
	})
	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	restConfig.QPS, restConfig.Burst = 1000, 1000
	client := newClient(t, restConfig)
	pollCtx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	err = wait.PollUntilContextCancel(pollCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, apiserver.DefaultServiceCIDRName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("server not ready: %v", err)
	}
	return restConfig
}

func newClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// newAllocator starts an allocator with its own client and informers, owned
// by the test, and waits until it is ready.
func newAllocator(t *testing.T, cfg *rest.Config, ipv6 bool) *ipaddress.Allocator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := ipaddress.New(ctx, ipaddress.Config{Client: newClient(t, cfg), IPv6: ipv6})
	if err != nil {
		t.Fatalf("new allocator: %v", err)
	}
	waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := a.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	return a
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// poll waits until cond holds.
func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, errors.Unwrap(err))
	}
}
