package integration

import (
	"fmt"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
)

func TestReplicasShareEtcd(t *testing.T) {
	t.Parallel()
	forEachModel(t, testReplicasShareEtcd)
}

// testReplicasShareEtcd runs two servers on one etcd and creates Services
// through both at once: no address may be handed out twice.
func testReplicasShareEtcd(t *testing.T, model string) {
	a := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/24"})
	b := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/24", etcd: a.etcd})
	ctx := testContext(t)

	const perReplica = 60
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ips  = map[string]string{}
		errs []error
	)
	for r, client := range []kubernetes.Interface{a.client, b.client} {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < perReplica; i += 4 {
					name := fmt.Sprintf("r%d-%03d", r, i)
					svc, err := create(ctx, client, newService(name))
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if other, dup := ips[svc.Spec.ClusterIP]; dup {
						errs = append(errs, fmt.Errorf("%s and %s both got %s", other, name, svc.Spec.ClusterIP))
					} else {
						ips[svc.Spec.ClusterIP] = name
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(ips) != 2*perReplica {
		t.Errorf("got %d distinct IPs, want %d", len(ips), 2*perReplica)
	}
	// Each replica sees the other's allocations (a sample of them).
	checked := 0
	for ip, name := range ips {
		if checked == 10 {
			break
		}
		checked++
		if name[1] == '0' {
			expectTaken(t, ctx, b.client, ip)
		} else {
			expectTaken(t, ctx, a.client, ip)
		}
	}
}
