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

// BenchmarkKubeCreate measures a Service create through a real
// kube-apiserver (hack/webhook-e2e.sh -bench KubeCreate -run '^$') with the
// webhook registered and without it, one create at a time; with it, also
// the webhook's own call, as p50 and p99.
func BenchmarkKubeCreate(b *testing.B) {
	k := startKube(b, "10.96.0.0/16")
	f, _ := startWebhookOn(b, k, 2, servicecidrs.Policy{})
	ctx := context.Background()
	var run int
	creates := func(b *testing.B) []time.Duration {
		run++
		var took []time.Duration
		for i := 0; b.Loop(); i++ {
			start := time.Now()
			if _, err := k.client.CoreV1().Services("default").Create(ctx, service("default", fmt.Sprintf("b%d-%d", run, i)), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		return took
	}
	b.Run("webhook", func(b *testing.B) {
		before := len(f.took())
		took := creates(b)
		calls := f.took()[before:]
		b.ReportMetric(pct(took, 50).Seconds()*1e3, "p50-ms")
		b.ReportMetric(pct(took, 99).Seconds()*1e3, "p99-ms")
		b.ReportMetric(pct(calls, 50).Seconds()*1e3, "webhook-p50-ms")
		b.ReportMetric(pct(calls, 99).Seconds()*1e3, "webhook-p99-ms")
	})
	b.Run("no-webhook", func(b *testing.B) {
		if err := k.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "allocator", metav1.DeleteOptions{}); err == nil {
			time.Sleep(2 * time.Second) // kube-apiserver's webhook configuration informer
		}
		took := creates(b)
		b.ReportMetric(pct(took, 50).Seconds()*1e3, "p50-ms")
		b.ReportMetric(pct(took, 99).Seconds()*1e3, "p99-ms")
	})
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
