package ipaddress_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
)

// startServer runs the project's API server in-process on a real embedded
// etcd, with serviceRange as its default ServiceCIDR, and returns the admin
// rest config. The server stops on cleanup. The server itself runs the
// bitmap model, so its own kubernetes Service claims no IPAddress and the
// allocators under test own every IPAddress of the range.
func startServer(t *testing.T, serviceRange string) *rest.Config {
	t.Helper()
	return testserver.Start(t, testserver.Options{ServiceRange: serviceRange, Model: string(model.Bitmap)}).RESTConfig
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
