package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/pkg/model"
)

func hasEvent(ctx context.Context, c kubernetes.Interface, reason, objName string) (bool, error) {
	ev, err := c.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		return false, err
	}
	for _, e := range ev.Items {
		if e.InvolvedObject.Name == objName {
			return true, nil
		}
	}
	return false, nil
}

// TestDeletedDefaultServiceCIDR: deleting the default ServiceCIDR leaves it
// terminating while the kubernetes Service's IPAddress points at it. A new
// Service then must not fail with a misleading "range is full": the error
// and an event on the ServiceCIDR say what is wrong and what to do.
func TestDeletedDefaultServiceCIDR(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/24"})
	c := s.client
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, apiserver.DefaultServiceCIDRName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the allocator to stop serving the terminating ServiceCIDR", func(ctx context.Context) (bool, error) {
		_, err := create(ctx, c, newService("after-delete"))
		if err == nil {
			_ = c.CoreV1().Services("default").Delete(ctx, "after-delete", metav1.DeleteOptions{})
			return false, nil
		}
		msg := err.Error()
		if strings.Contains(msg, "range is full") {
			t.Fatalf("misleading error: %v", err)
		}
		return strings.Contains(msg, "no ready ServiceCIDR serves IPv4 addresses") && strings.Contains(msg, `"kubernetes" is being deleted`), nil
	})
	eventually(t, 30*time.Second, "a DefaultServiceCIDRTerminating event", func(ctx context.Context) (bool, error) {
		return hasEvent(ctx, c, apiserver.ReasonDefaultServiceCIDRTerminating, apiserver.DefaultServiceCIDRName)
	})
	// Another ServiceCIDR covering the range lets allocation go on.
	mustCreateServiceCIDR(t, ctx, c, "replacement", "10.96.0.0/24")
	eventually(t, 30*time.Second, "allocation from the replacement", func(ctx context.Context) (bool, error) {
		_, err := create(ctx, c, newService("after-replacement"))
		return err == nil, nil
	})
}

// TestChangedRangeIsNotSilent: a --service-cluster-ip-range the default
// ServiceCIDR cannot follow raises upstream's
// KubernetesDefaultServiceCIDRInconsistent event (and a warning line),
// saying which range is in effect and how to change it; the server is
// ready, allocating from the stored range.
func TestChangedRangeIsNotSilent(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/24"})
	s.stop()
	s = startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.97.0.0/24", etcd: s.etcd})
	var message string
	eventually(t, 30*time.Second, "a KubernetesDefaultServiceCIDRInconsistent event", func(ctx context.Context) (bool, error) {
		ev, err := s.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "reason=" + apiserver.ReasonKubernetesDefaultServiceCIDRInconsistent})
		if err != nil || len(ev.Items) == 0 {
			return false, err
		}
		message = ev.Items[0].Message
		return ev.Items[0].InvolvedObject.Name == apiserver.DefaultServiceCIDRName, nil
	})
	for _, want := range []string{
		`--service-cluster-ip-range is 10.97.0.0/24 but the stored default ServiceCIDR "kubernetes" has 10.96.0.0/24`,
		"the stored ServiceCIDR is in effect",
		"set --service-cluster-ip-range=10.96.0.0/24 on every replica",
		`"Replacing the default range" in docs/operations.md`,
	} {
		if !strings.Contains(message, want) {
			t.Errorf("event %q lacks %q", message, want)
		}
	}
	ctx := testContext(t)
	if body, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Errorf("/readyz: %v %s", err, body)
	}
	svc, err := create(ctx, s.client, newService("after-restart"))
	if err != nil {
		t.Fatal(err)
	}
	if ip := svc.Spec.ClusterIP; !strings.HasPrefix(ip, "10.96.0.") {
		t.Errorf("a new Service got %s, want an address of the stored 10.96.0.0/24", ip)
	}
}

func mustCreateServiceCIDR(t *testing.T, ctx context.Context, c kubernetes.Interface, name string, cidrs ...string) {
	t.Helper()
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceCIDR %s: %v", name, err)
	}
}
