package iprepair_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestIPAddressRepairOutOfScope: Services allocated by the server's scoped
// allocator, then namespaces relabelled so that two of them hold addresses
// outside what their scope now allows. Run (informers, its full pass an
// hour away) reports both with an event, from the namespace updates, and
// again when a ServiceCIDR added changes what one may use; the one-shot pass
// (lists) reports them too; neither moves or frees anything.
func TestIPAddressRepairOutOfScope(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	c := srv.Client
	for name, labels := range map[string]map[string]string{"team-a": {"team": "a"}, "other": nil} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "a-only", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/28"}}}
	if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := map[string]string{}
	for _, ns := range []string{"team-a", "other"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		// The allocator serves the new ServiceCIDR once its informer has it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s/s: %v", ns, err)
			}
			ip[ns] = got.Spec.ClusterIP
			if inA := strings.HasPrefix(got.Spec.ClusterIP, "10.1.0."); inA == (ns == "team-a") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/s got %s", ns, got.Spec.ClusterIP)
			}
			if err := c.CoreV1().Services(ns).Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: c, Recorder: report.NewEventRecorder(ctx, c), Interval: time.Hour, OrphanGrace: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if rep := runOnce(t, ctx, ctrl); !rep.Consistent() {
		t.Fatalf("before relabelling: %+v", rep.Problems)
	}

	// Run (informers) with its full pass an hour away: only the namespace
	// handler can bring the relabelled namespaces' Services back.
	stop := runRepair(ctx, t, ctrl)
	relabel(t, ctx, srv, "team-a", "z")
	relabel(t, ctx, srv, "other", "a")
	want := []report.Problem{
		{Type: report.TypeOutOfScope, Reason: report.ReasonOutOfScope, IP: ip["team-a"], Service: "team-a/s",
			Message: fmt.Sprintf("Cluster IP [IPv4]: %s is outside the ServiceCIDRs this Service's scope allows (it may use ServiceCIDR \"kubernetes\"); it keeps the address until it is recreated", ip["team-a"])},
		{Type: report.TypeOutOfScope, Reason: report.ReasonOutOfScope, IP: ip["other"], Service: "other/s",
			Message: fmt.Sprintf("Cluster IP [IPv4]: %s is outside the ServiceCIDRs this Service's scope allows (it may use ServiceCIDR \"a-only\"); it keeps the address until it is recreated", ip["other"])},
	}
	for _, p := range want {
		ns, _, _ := strings.Cut(p.Service, "/")
		waitObjectEvent(t, srv, "Service", ns, "s", report.ReasonOutOfScope, p.Message)
	}
	// A scoped ServiceCIDR added for team z: team-a/s (now team z) may use it
	// instead. Its address lies outside the new prefix, so only the
	// re-judging of every held address on a scope change brings it back.
	zOnly := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "z-only", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: "team=z"}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.2.0.0/28"}}}
	if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, zOnly, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want[0].Message = fmt.Sprintf("Cluster IP [IPv4]: %s is outside the ServiceCIDRs this Service's scope allows (it may use ServiceCIDR \"z-only\"); it keeps the address until it is recreated", ip["team-a"])
	waitObjectEvent(t, srv, "Service", "team-a", "s", report.ReasonOutOfScope, want[0].Message)
	stop()
	rep := runOnce(t, ctx, ctrl)
	if diff := cmp.Diff(want, rep.Problems, cmpProblemsByIP); diff != "" {
		t.Fatalf("one-shot pass (-want +got):\n%s", diff)
	}
	if rep.Writes != 0 {
		t.Fatalf("the pass wrote %d objects; a scope moves nothing", rep.Writes)
	}
	for _, p := range want {
		waitIPAddress(t, srv, p.IP, true)
	}
}

var cmpProblemsByIP = cmp.Transformer("byIP", func(ps []report.Problem) map[string]report.Problem {
	out := map[string]report.Problem{}
	for _, p := range ps {
		out[p.IP] = p
	}
	return out
})

func relabel(t *testing.T, ctx context.Context, srv *testserver.Server, ns, team string) {
	t.Helper()
	obj, err := srv.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels["team"] = team
	if _, err := srv.Client.CoreV1().Namespaces().Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
