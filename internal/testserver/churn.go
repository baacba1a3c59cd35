package testserver

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Churn creates and deletes a Service in namespace over and over through c,
// so that etcd's revision keeps moving, until the returned stop (at most
// 100,000 times). A write that fails before stop fails the test.
func Churn(t testing.TB, ctx context.Context, c kubernetes.Interface, namespace string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		svcs := c.CoreV1().Services(namespace)
		for i := 0; ctx.Err() == nil && i < 100000; i++ {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}
			if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				if ctx.Err() == nil {
					t.Errorf("churn: %v", err)
				}
				return
			}
			if err := svcs.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
				if ctx.Err() == nil {
					t.Errorf("churn: %v", err)
				}
				return
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
