package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestDeleteRightAfterFinalizer: a Service delete reads the Service from the
// watch cache (pkg/servicealloc/delete_read.go), which may not yet have an
// update made a moment before, here through another replica. A delete right
// after a finalizer was added must still mark the Service and keep its
// address, as kube-apiserver does, and never delete it at once: the delete
// checks that what it deletes is what it read, and otherwise decides again
// from etcd. Each Service is then deleted for good and its address freed.
func TestDeleteRightAfterFinalizer(t *testing.T) {
	t.Parallel()
	a := startServer(t, serverOptions{model: "ipaddress", serviceRange: "10.96.0.0/16"})
	b := startServer(t, serverOptions{model: "ipaddress", serviceRange: "10.96.0.0/16", etcd: a.etcd})
	ctx := testContext(t)
	const services, workers = 320, 16
	const hold = "example.com/hold"
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for w := range workers {
		wg.Go(func() {
			for i := w; i < services; i += workers {
				name := fmt.Sprintf("fin-%03d", i)
				created, err := create(ctx, a.client, newService(name))
				if err != nil {
					fail(err)
					continue
				}
				created.Finalizers = []string{hold}
				if _, err := b.client.CoreV1().Services("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
					fail(fmt.Errorf("add finalizer to %s through b: %w", name, err))
					continue
				}
				if err := a.client.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					fail(fmt.Errorf("delete %s through a: %w", name, err))
					continue
				}
				got, err := a.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
				switch {
				case err != nil:
					fail(fmt.Errorf("%s after its delete: %w; a Service with a finalizer must stay until it is removed", name, err))
				case got.DeletionTimestamp == nil || !slices.Contains(got.Finalizers, hold):
					fail(fmt.Errorf("%s after its delete: deletionTimestamp %v, finalizers %v", name, got.DeletionTimestamp, got.Finalizers))
				case got.Spec.ClusterIP != created.Spec.ClusterIP:
					fail(fmt.Errorf("%s after its delete: clusterIP %s, was %s", name, got.Spec.ClusterIP, created.Spec.ClusterIP))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// Every marked Service still holds its address; dropping the finalizer
	// deletes it and frees the address.
	for i := range services {
		name := fmt.Sprintf("fin-%03d", i)
		got, err := a.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.client.NetworkingV1().IPAddresses().Get(ctx, got.Spec.ClusterIP, metav1.GetOptions{}); err != nil {
			t.Errorf("%s is marked for deletion and its address %s is not held: %v", name, got.Spec.ClusterIP, err)
		}
		got.Finalizers = nil
		if _, err := a.client.CoreV1().Services("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitAddressFreed(t, ctx, a, got.Spec.ClusterIP)
	}
}

// waitAddressFreed waits until the IPAddress of ip is gone.
func waitAddressFreed(t *testing.T, ctx context.Context, s *server, ip string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.client.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("address %s still held after its Service was deleted: %v", ip, err)
	}
}
