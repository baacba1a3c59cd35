package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// eventually polls cond every 100ms for up to timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within %v (last error: %v)", what, timeout, last)
	}
}

func readyCondition(ctx context.Context, c kubernetes.Interface, name string) (*networkingv1.ServiceCIDR, *metav1.Condition, error) {
	sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return sc, meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady), nil
}

func waitReadyCIDR(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	eventually(t, 30*time.Second, name+" ready with finalizer", func(ctx context.Context) (bool, error) {
		sc, cond, err := readyCondition(ctx, c, name)
		if err != nil {
			return false, err
		}
		return slices.Contains(sc.Finalizers, servicecidr.Finalizer) && cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
}

func TestServiceCIDRController(t *testing.T) {
	t.Parallel()
	forEachModel(t, testServiceCIDRController)
}

func testServiceCIDRController(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16"})
	c := s.client
	ctx := testContext(t)
	waitReadyCIDR(t, c, "kubernetes")

	newCIDR := func(name, cidr string) {
		t.Helper()
		_, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create ServiceCIDR %s: %v", name, err)
		}
		waitReadyCIDR(t, c, name)
	}
	newCIDR("extra", "10.100.0.0/24")
	if _, err := c.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "10.100.0.5"},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "someone"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deletion waits while the IPAddress is covered by no other ServiceCIDR.
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "extra Terminating", func(ctx context.Context) (bool, error) {
		sc, cond, err := readyCondition(ctx, c, "extra")
		if err != nil {
			return false, err
		}
		return sc.DeletionTimestamp != nil && cond != nil && cond.Status == metav1.ConditionFalse &&
			cond.Reason == networkingv1.ServiceCIDRReasonTerminating && cond.Message == servicecidr.TerminatingMessage, nil
	})
	time.Sleep(time.Second) // still there a moment later
	if _, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "extra", metav1.GetOptions{}); err != nil {
		t.Fatalf("extra deleted while an IPAddress depends on it: %v", err)
	}

	// A wider ServiceCIDR covering the address unblocks it.
	newCIDR("wider", "10.100.0.0/16")
	eventually(t, 30*time.Second, "extra gone", func(ctx context.Context) (bool, error) {
		_, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "extra", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// Without it, removing the IPAddress unblocks the deletion.
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, "wider", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "wider Terminating", func(ctx context.Context) (bool, error) {
		_, cond, err := readyCondition(ctx, c, "wider")
		return err == nil && cond != nil && cond.Reason == networkingv1.ServiceCIDRReasonTerminating, err
	})
	if err := c.NetworkingV1().IPAddresses().Delete(ctx, "10.100.0.5", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "wider gone", func(ctx context.Context) (bool, error) {
		_, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "wider", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// The default ServiceCIDR: the kubernetes Service's IPAddress holds it
	// (in the bitmap model too, which keeps IPAddresses true), so it stays
	// terminating; TestDeletedDefaultServiceCIDR covers what users then see.
	if err := c.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "default ServiceCIDR Terminating", func(ctx context.Context) (bool, error) {
		_, cond, err := readyCondition(ctx, c, "kubernetes")
		return err == nil && cond != nil && cond.Reason == networkingv1.ServiceCIDRReasonTerminating, err
	})
}
