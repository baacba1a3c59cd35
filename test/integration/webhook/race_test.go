package webhook_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/internal/webhook"
)

// TestWebhookReplicasRace: two webhook replicas, each preferring its stripe
// of the range (members.go; fixed here, as our server serves no Leases),
// and 32 concurrent clients create Services through the API server with the
// addresses the replicas pick, until the range is 90% full. No address is
// held twice (the API server refuses a taken one), and fewer than 1 create
// in 1,000 is refused as "provided IP is already allocated".
func TestWebhookReplicasRace(t *testing.T) {
	if testing.Short() {
		t.Skip("creates thousands of Services; not in -short")
	}
	t.Parallel()
	const creates, clients = 3600, 32 // 90% of a /20's 4,094 addresses
	srv := testserver.Start(t, testserver.Options{Model: "ipaddress", ServiceRange: "10.96.0.0/20"})
	var replicas []replica
	for k := range 2 {
		replicas = append(replicas, startReplicaWith(t, webhook.Config{Client: srv.Client, Stripe: webhook.Stripe{Index: k, Of: 2}}))
	}
	ctx := context.Background()
	var next, conflicts, failed atomic.Int64
	var wg sync.WaitGroup
	seen := sync.Map{}
	for c := range clients {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 7))
			for {
				i := next.Add(1)
				if i > creates {
					return
				}
				r := replicas[rnd.IntN(len(replicas))]
				svc, resp := r.admitService(t, service("default", fmt.Sprintf("s-%d", i)), false)
				if !resp.Allowed || resp.Patch == nil {
					failed.Add(1)
					t.Errorf("create %d: %+v", i, resp.Result)
					continue
				}
				created, err := srv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
				switch {
				case err != nil && strings.Contains(err.Error(), "provided IP is already allocated"):
					conflicts.Add(1)
				case err != nil:
					failed.Add(1)
					t.Errorf("create %d: %v", i, err)
				default:
					if other, dup := seen.LoadOrStore(created.Spec.ClusterIP, created.Name); dup {
						t.Errorf("%s held by %s and %s", created.Spec.ClusterIP, other, created.Name)
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d creates through 2 replicas and %d clients: %d refused as already allocated, %d other failures", creates, clients, conflicts.Load(), failed.Load())
	if n := conflicts.Load(); n*1000 > creates {
		t.Errorf("%d of %d creates refused as already allocated: want fewer than 1 in 1,000", n, creates)
	}
}
