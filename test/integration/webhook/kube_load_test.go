package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/webhook"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestWebhookKubeConflicts: 32 clients fill a scoped /20 through
// kube-apiserver until it refuses, with one webhook replica and with two;
// conflicts (a create refused as "provided IP is already allocated") are
// counted by the scope's fill. Below 90% fewer than 1 in 1,000 creates may
// meet one. Above it, two replicas' stripes are full and each picks
// anywhere, so they meet there; one replica never meets itself (its holds
// keep each pick until kube-apiserver's IPAddress is seen).
func TestWebhookKubeConflicts(t *testing.T) {
	const size = 4094 // a /20 without its network and broadcast addresses
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			k := startKube(t, "10.96.0.0/16")
			_, rs := startWebhookOn(t, k, replicas, servicecidrs.Policy{})
			mustCreateCIDR(t, k.client, "team-a", "10.210.0.0/20", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"})
			for _, r := range rs {
				waitServed(t, r, "10.210.0.0/20")
				waitUntilT(t, 30*time.Second, "the replicas count each other", func() bool { return r.w.Stripe().Of == replicas })
			}
			mustCreateTeamA(t, k.client)
			c := fillScope(t, k, "a", 32, size)
			for b, what := range []string{"below 10%", "10% to 90%", "above 90%"} {
				t.Logf("%d replica(s), 32 clients, scope %s full: %d created, %d conflicts (%.2f per 1,000 creates)",
					replicas, what, c.created[b], c.conflicts[b], c.perThousand(b))
			}
			for b := range 2 {
				if c.perThousand(b) >= 1 {
					t.Errorf("%.2f creates per 1,000 refused as already allocated while the scope had room (bucket %d): want fewer than 1", c.perThousand(b), b)
				}
			}
			if replicas == 1 && c.conflicts[2] > 0 {
				t.Errorf("one replica met itself %d times above 90%%: want none", c.conflicts[2])
			}
		})
	}
}

// placed is a Service created under load, and whether the webhook was
// down when its create started and when it was answered.
type placed struct {
	svc              *corev1.Service
	downAt, downTill bool
}

// TestWebhookKubeStoppedMidLoad: 16 clients create Services in a scoped
// namespace and an unscoped one while the webhook stops answering for a
// third of the creates and comes back. failurePolicy Ignore: no create
// fails; kube-apiserver places those of the outage by its own rules, in
// any ServiceCIDR; the repair reports each one it placed outside its scope,
// and the draining ServiceCIDR's condition counts those it placed there.
// Every Service created while the webhook answered follows the rules.
func TestWebhookKubeStoppedMidLoad(t *testing.T) {
	k := startKube(t, "10.96.0.0/16")
	ctx := context.Background()
	f, rs := startWebhookOn(t, k, 2, servicecidrs.Policy{}, func(c *webhook.Config) { c.Conditions = true })
	mustCreateCIDR(t, k.client, "team-a", "10.210.0.0/20", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"})
	mustCreateCIDR(t, k.client, "old", "10.200.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "true"})
	mustCreateCIDR(t, k.client, "manual", "10.201.0.0/24", map[string]string{lifecycle.ManualOnlyAnnotation: "true"})
	for _, r := range rs {
		for _, p := range []string{"10.210.0.0/20", "10.200.0.0/24", "10.201.0.0/24"} {
			waitServed(t, r, p)
		}
	}
	mustCreateTeamA(t, k.client)

	const total, stop, resume = 600, 200, 400
	var next atomic.Int64
	var mu sync.Mutex
	var all []placed
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				switch i {
				case stop:
					f.down.Store(true)
				case resume:
					f.down.Store(false)
				}
				ns := []string{"default", "a"}[i%2]
				downAt := f.down.Load()
				got, err := k.client.CoreV1().Services(ns).Create(ctx, service(ns, fmt.Sprintf("load-%d", i)), metav1.CreateOptions{})
				if err != nil {
					t.Errorf("create %s/load-%d (webhook down: %v): %v; want every create to pass (failurePolicy Ignore)", ns, i, downAt, err)
					continue
				}
				mu.Lock()
				all = append(all, placed{svc: got, downAt: downAt, downTill: f.down.Load()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	// What the rules say of each Service: outside its scope (the repair
	// reports it), in the draining range (its condition counts it).
	outside := func(s *corev1.Service) bool {
		return (s.Namespace == "a") != inPrefix(t, s.Spec.ClusterIP, "10.210.0.0/20")
	}
	want, maybe := map[string]bool{}, map[string]bool{}
	var outage, inOld, inOldMaybe, inManual int
	for _, p := range all {
		key := p.svc.Namespace + "/" + p.svc.Name
		ip := p.svc.Spec.ClusterIP
		switch {
		case !p.downAt && !p.downTill:
			if outside(p.svc) || inPrefix(t, ip, "10.200.0.0/24") || inPrefix(t, ip, "10.201.0.0/24") {
				t.Errorf("%s at %s, created while the webhook answered: outside its scope, or in a draining or manual-only range", key, ip)
			}
		case p.downAt && p.downTill:
			outage++
			if outside(p.svc) {
				want[key] = true
			}
			if inPrefix(t, ip, "10.200.0.0/24") {
				inOld++
			}
			if inPrefix(t, ip, "10.201.0.0/24") {
				inManual++
			}
		default: // the webhook stopped or came back during the create
			if outside(p.svc) {
				maybe[key] = true
			}
			if inPrefix(t, ip, "10.200.0.0/24") {
				inOldMaybe++
			}
		}
	}
	rep := repairReport(t, k)
	var got []string
	for _, p := range rep.Problems {
		if p.Type == report.TypeOutOfScope {
			got = append(got, p.Service)
			if !want[p.Service] && !maybe[p.Service] {
				t.Errorf("the repair reports %s outside its scope: %s", p.Service, p.Message)
			}
		}
	}
	for key := range want {
		if !slices.Contains(got, key) {
			t.Errorf("kube-apiserver placed %s outside its scope while the webhook was down, and the repair does not report it", key)
		}
	}
	t.Logf("%d creates, %d with the webhook down (start to answer): kube-apiserver placed %d outside their scope, %d in the draining range, %d in the manual-only one; the repair reports %d outside their scope",
		len(all), outage, len(want), inOld, inManual, len(got))
	if outage == 0 || len(want) == 0 {
		t.Errorf("the outage placed %d Services, %d outside their scope: the test proves nothing", outage, len(want))
	}
	waitUntilT(t, time.Minute, "the draining range's condition counts what kube-apiserver placed there", func() bool {
		sc, err := k.client.NetworkingV1().ServiceCIDRs().Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			return false
		}
		c := meta.FindStatusCondition(sc.Status.Conditions, servicecidr.ConditionDraining)
		for n := inOld; n <= inOld+inOldMaybe; n++ {
			if c != nil && (strings.Contains(c.Message, fmt.Sprintf("; %d Services still hold", n)) ||
				(n == 1 && strings.Contains(c.Message, "; 1 Service still")) || (n == 0 && strings.Contains(c.Message, "no Service holds"))) {
				return true
			}
		}
		return false
	})
}
