package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/pkg/model"
)

// warnings collects the warnings a client receives.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// TestFullRangeHint: a create that finds every address taken fails with
// kube-apiserver's error text, and the client gets a warning beside it that
// names the full ServiceCIDR and what makes room.
func TestFullRangeHint(t *testing.T) {
	ctx := testContext(t)
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/28"})
	cfg := rest.CopyConfig(s.restConfig)
	seen := &warnings{}
	cfg.WarningHandler = seen
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A /28 has 14 usable addresses, one the kubernetes Service's.
	var full error
	for i := 0; i < 20 && full == nil; i++ {
		if _, err := create(ctx, c, newService(fmt.Sprintf("fill-%d", i))); err != nil {
			full = err
		}
	}
	if full == nil || !strings.HasSuffix(full.Error(), "failed to allocate a serviceIP: range is full") {
		t.Fatalf("create on a full range: %v, want kube-apiserver's \"failed to allocate a serviceIP: range is full\"", full)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	want := `the IPv4 ServiceCIDRs that serve this Service have no free address: "kubernetes" (10.96.0.0/28); add a ServiceCIDR for more addresses`
	for _, w := range seen.text {
		if strings.Contains(w, want) {
			return
		}
	}
	t.Fatalf("warnings %q, want one containing %q", seen.text, want)
}
