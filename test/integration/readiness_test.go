package integration

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/pkg/allocation"
)

// unreadyAllocator answers ErrNotReady while notReady is set.
type unreadyAllocator struct {
	allocation.Interface
	notReady *atomic.Bool
}

func (u unreadyAllocator) Allocate(ctx context.Context, ip netip.Addr, o allocation.Owner) error {
	if u.notReady.Load() {
		return allocation.ErrNotReady
	}
	return u.Interface.Allocate(ctx, ip, o)
}

func (u unreadyAllocator) AllocateNext(ctx context.Context, o allocation.Owner) (netip.Addr, error) {
	if u.notReady.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	return u.Interface.AllocateNext(ctx, o)
}

func (u unreadyAllocator) DryRun() allocation.Interface {
	return unreadyAllocator{Interface: u.Interface.DryRun(), notReady: u.notReady}
}

// TestNotReadyUntilBootstrapped: while the allocator is not ready, bootstrap
// cannot create the kubernetes Service, /readyz fails, creates get 503
// with Retry-After, and the start-up is not over (Started); once it is
// ready, everything proceeds.
func TestNotReadyUntilBootstrapped(t *testing.T) {
	t.Parallel()
	var notReady atomic.Bool
	notReady.Store(true)
	wrap := func(a allocation.Interface) allocation.Interface {
		return unreadyAllocator{Interface: a, notReady: &notReady}
	}
	s := startServer(t, serverOptions{serviceRange: "10.96.0.0/16", model: "bitmap", wrapAllocator: wrap, noWait: true})
	ctx := testContext(t)

	// Wait until the server answers at all, then check it is not ready.
	var body string
	eventually(t, 60*time.Second, "server answers /readyz", func(ctx context.Context) (bool, error) {
		res := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "1").Do(ctx)
		var code int
		res.StatusCode(&code)
		raw, _ := res.Raw()
		body = string(raw)
		return code != 0, nil
	})
	time.Sleep(time.Second)
	res := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "1").Do(ctx)
	var code int
	res.StatusCode(&code)
	raw, _ := res.Raw()
	body = string(raw)
	if code == http.StatusOK || !strings.Contains(body, "allocator-bootstrap") {
		t.Fatalf("ready before bootstrap: HTTP %d %s", code, body)
	}
	select {
	case <-s.started: // the start-up's garbage collection would end here
		t.Fatal("the start-up is over before bootstrap")
	default:
	}

	// No client-side retries: client-go retries a 503 that carries
	// Retry-After (which is how the test first noticed it is sent).
	raw503 := s.client.CoreV1().RESTClient().Post().Namespace("default").Resource("services").
		MaxRetries(0).Body(newService("early")).Do(ctx)
	expectStatus(t, raw503.Error(), 503, "allocator not ready")
	var code503 int
	raw503.StatusCode(&code503)
	if code503 != http.StatusServiceUnavailable {
		t.Fatalf("want 503, got %d", code503)
	}
	// client-go surfaces Retry-After as the status details.
	if st, ok := raw503.Error().(interface{ Status() metav1.Status }); !ok || st.Status().Details == nil || st.Status().Details.RetryAfterSeconds < 1 {
		t.Errorf("no Retry-After on 503: %v", raw503.Error())
	}

	// And the header itself.
	transport, err := rest.TransportFor(s.restConfig)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.restConfig.Host+"/api/v1/namespaces/default/services",
		strings.NewReader(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"early3"},"spec":{"ports":[{"port":80}]}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("want 503 with Retry-After, got %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	notReady.Store(false)
	waitReady(t, s.client)
	select {
	case <-s.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the start-up is not over 30 s after the server is ready")
	}
	mustCreate(t, ctx, s.client, newService("late"))
}
