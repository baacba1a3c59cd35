package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
)

// TestWebhookKubeLatency logs, for a real kube-apiserver, the webhook's
// own latency (a call through the front to a replica) and the latency of a
// Service create with the webhook and without it (its configurations
// deleted): figures, not assertions.
func TestWebhookKubeLatency(t *testing.T) {
	k := startKube(t, "10.96.0.0/16")
	ctx := context.Background()
	f, _ := startWebhookOn(t, k, 2, servicecidrs.Policy{})
	const n = 300
	creates := func(prefix string) []time.Duration {
		var took []time.Duration
		for i := range n {
			start := time.Now()
			if _, err := k.client.CoreV1().Services("default").Create(ctx, service("default", fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		return took
	}
	with := creates("with")
	calls := f.took()
	if err := k.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "allocator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // kube-apiserver's webhook configuration informer
	without := creates("without")
	t.Logf("FIGURES %d sequential creates: the webhook's call p50 %v p99 %v; a create with the webhook p50 %v p99 %v, without it p50 %v p99 %v",
		n, pct(calls, 50), pct(calls, 99), pct(with, 50), pct(with, 99), pct(without, 50), pct(without, 99))
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(10 * time.Microsecond)
}
