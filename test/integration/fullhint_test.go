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
// names the full range and what makes room. Both models.
func TestFullRangeHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model model.Name
		want  string
	}{
		{model.IPAddress, `the IPv4 ServiceCIDRs that serve this Service have no free address: "kubernetes" (10.96.0.0/28); add a ServiceCIDR for more addresses`},
		{model.Bitmap, `the IPv4 service IP range 10.96.0.0/28 (--service-cluster-ip-range) has no free address, and the bitmap model serves one range per family`},
	} {
		t.Run(string(tc.model), func(t *testing.T) { fullRangeHint(t, tc.model, tc.want) })
	}
}

func fullRangeHint(t *testing.T, m model.Name, want string) {
	ctx := testContext(t)
	s := startServer(t, serverOptions{model: string(m), serviceRange: "10.96.0.0/28"})
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
	for _, w := range seen.text {
		if strings.Contains(w, want) {
			return
		}
	}
	t.Fatalf("warnings %q, want one containing %q", seen.text, want)
}
