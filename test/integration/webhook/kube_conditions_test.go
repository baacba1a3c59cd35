package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/webhook"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// cidrHistory is every state of the ServiceCIDRs a watch saw, in order.
type cidrHistory struct {
	mu     sync.Mutex
	states map[string][]*networkingv1.ServiceCIDR // guarded by mu
}

func watchCIDRs(t *testing.T, k kube) *cidrHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := k.client.NetworkingV1().ServiceCIDRs().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &cidrHistory{states: map[string][]*networkingv1.ServiceCIDR{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			sc, ok := ev.Object.(*networkingv1.ServiceCIDR)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			h.mu.Lock()
			h.states[sc.Name] = append(h.states[sc.Name], sc)
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *cidrHistory) of(name string) []*networkingv1.ServiceCIDR {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*networkingv1.ServiceCIDR(nil), h.states[name]...)
}

// last is the latest state seen of ServiceCIDR name, nil before the first.
func (h *cidrHistory) last(name string) *networkingv1.ServiceCIDR {
	s := h.of(name)
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// has reports whether sc carries condition typ with status and, when
// reason is not empty, that reason.
func has(sc *networkingv1.ServiceCIDR, typ string, status metav1.ConditionStatus, reason string) bool {
	if sc == nil {
		return false
	}
	c := meta.FindStatusCondition(sc.Status.Conditions, typ)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

// ours is our conditions of sc, without their times, for comparing states.
func ours(sc *networkingv1.ServiceCIDR) string {
	var s string
	for _, c := range sc.Status.Conditions {
		if c.Type != networkingv1.ServiceCIDRConditionReady {
			s += fmt.Sprintf("%s=%s/%s/%s;", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}

func ready(sc *networkingv1.ServiceCIDR) string {
	c := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s/%s/%s", c.Status, c.Reason, c.Message, c.LastTransitionTime)
}

// TestWebhookKubeConditions: beside a stock kube-apiserver, the webhook
// writes our conditions (capacity, draining, deleting) into
// servicecidrs/status while kube-controller-manager writes Ready there by
// server-side apply, and neither write removes the other's: once both are
// on a ServiceCIDR, every later state of it a watch sees carries both,
// through a fill to full and a deletion held by an IPAddress (Ready=False
// Terminating beside our Deleting).
func TestWebhookKubeConditions(t *testing.T) {
	k := startKube(t, "10.96.0.0/16")
	ctx := context.Background()
	history := watchCIDRs(t, k)
	_, replicas := startWebhookOn(t, k, 2, servicecidrs.Policy{}, func(c *webhook.Config) { c.Conditions = true })
	mustCreateCIDR(t, k.client, "small", "10.210.0.0/28", nil)
	mustCreateCIDR(t, k.client, "old", "10.200.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "true"})
	mustCreateCIDR(t, k.client, "going", "10.202.0.0/24", nil)
	for _, r := range replicas {
		for _, p := range []string{"10.210.0.0/28", "10.202.0.0/24"} {
			waitServed(t, r, p)
		}
	}
	const limit = time.Minute
	ready := networkingv1.ServiceCIDRConditionReady
	waitUntilT(t, limit, "small: Ready=True and capacity available", func() bool {
		sc := history.last("small")
		return has(sc, ready, metav1.ConditionTrue, "") && has(sc, servicecidr.ConditionCapacityIPv4, metav1.ConditionTrue, servicecidr.ReasonAvailable)
	})
	waitUntilT(t, limit, "old: Ready=True and draining", func() bool {
		sc := history.last("old")
		return has(sc, ready, metav1.ConditionTrue, "") && has(sc, servicecidr.ConditionDraining, metav1.ConditionTrue, "")
	})

	// Fill small with user-chosen addresses: each change of its capacity is
	// a write of ours, each followed by kube-controller-manager's apply.
	for i := 1; i <= 14; i++ {
		ip := fmt.Sprintf("10.210.0.%d", i)
		s := service("default", fmt.Sprintf("small-%d", i))
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
		if _, err := k.client.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create a Service at %s: %v", ip, err)
		}
		if i == 7 {
			waitUntilT(t, limit, "small: half used", func() bool {
				c := meta.FindStatusCondition(history.last("small").Status.Conditions, servicecidr.ConditionCapacityIPv4)
				return c != nil && strings.Contains(c.Message, "used 7,") && has(history.last("small"), ready, metav1.ConditionTrue, "")
			})
		}
	}
	waitUntilT(t, limit, "small: Ready=True and full", func() bool {
		sc := history.last("small")
		return has(sc, ready, metav1.ConditionTrue, "") && has(sc, servicecidr.ConditionCapacityIPv4, metav1.ConditionFalse, servicecidr.ReasonFull)
	})

	// Delete going while a Service holds an address in it: Ready=False
	// (kube-controller-manager) beside our Deleting.
	holder := service("default", "holder")
	holder.Spec.ClusterIP, holder.Spec.ClusterIPs = "10.202.0.5", []string{"10.202.0.5"}
	if _, err := k.client.CoreV1().Services("default").Create(ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.client.NetworkingV1().ServiceCIDRs().Delete(ctx, "going", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntilT(t, limit, "going: Ready=False Terminating and Deleting", func() bool {
		sc := history.last("going")
		return has(sc, ready, metav1.ConditionFalse, networkingv1.ServiceCIDRReasonTerminating) &&
			has(sc, servicecidr.ConditionDraining, metav1.ConditionTrue, servicecidr.ReasonDeleting)
	})
	time.Sleep(2 * servicecidr.DefaultConditionInterval) // writes that follow, if any, are seen too
	if err := k.client.CoreV1().Services("default").Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntilT(t, limit, "going deleted once its last IPAddress is", func() bool {
		_, err := k.client.NetworkingV1().ServiceCIDRs().Get(ctx, "going", metav1.GetOptions{})
		return err != nil
	})

	// small: ours written beside Ready (its fill); going: each written
	// beside the other (our Deleting, then kube-controller-manager's
	// Ready=False, in either order); old: both on it from the start.
	checkBothSurvive(t, "small", history.of("small"), true, false)
	checkBothSurvive(t, "old", history.of("old"), false, false)
	checkBothSurvive(t, "going", history.of("going"), true, true)
}

// checkBothSurvive checks the states of ServiceCIDR name: once Ready and
// one of ours are both on it, every later state carries both; with
// wantOurs (wantReady), ours (Ready) changed at least once while both were
// there.
func checkBothSurvive(t *testing.T, name string, states []*networkingv1.ServiceCIDR, wantOurs, wantReady bool) {
	t.Helper()
	both, oursWrites, readyWrites := false, 0, 0
	for i, sc := range states {
		hasReady := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady) != nil
		hasOurs := ours(sc) != ""
		if both && (!hasReady || !hasOurs) {
			t.Errorf("%s: resourceVersion %s dropped a condition: Ready %v, ours %v: %+v", name, sc.ResourceVersion, hasReady, hasOurs, sc.Status.Conditions)
		}
		if i > 0 && both {
			prev := states[i-1]
			if ours(prev) != ours(sc) {
				oursWrites++
			}
			if ready(prev) != ready(sc) {
				readyWrites++
			}
		}
		both = both || (hasReady && hasOurs)
	}
	t.Logf("%s: %d states seen; with both on it, ours changed %d times and Ready %d times", name, len(states), oursWrites, readyWrites)
	if !both {
		t.Errorf("%s: Ready and ours were never both on it", name)
	}
	if (wantOurs && oursWrites == 0) || (wantReady && readyWrites == 0) {
		t.Errorf("%s: with both on it, ours changed %d times and Ready %d times: want a write of ours %v, of Ready %v",
			name, oursWrites, readyWrites, wantOurs, wantReady)
	}
}
