// Package repairtest holds what the repair controllers' tests share:
// Services planted straight into etcd (bypassing allocation, as an
// operator's mistake or another component would) and waits on a server's
// view of them.
package repairtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Context bounds a test's calls to the server and etcd; it ends with the
// test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// PlantService writes a Service straight into etcd, as an operator's or
// another component's mistake would, bypassing allocation.
func PlantService(t testing.TB, client *clientv3.Client, namespace, name string, ips []string, created time.Time) {
	t.Helper()
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, UID: types.UID(uuid.NewUUID()),
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second)),
		},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ips[0],
			ClusterIPs: ips,
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}},
		},
	}
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatalf("encode planted service: %v", err)
	}
	if _, err := client.Put(context.Background(), etcdlayout.Layout{}.Service(namespace, name), string(value)); err != nil {
		t.Fatalf("plant service: %v", err)
	}
}

// DeletePlanted removes a Service straight from etcd, as PlantService
// wrote it.
func DeletePlanted(t testing.TB, client *clientv3.Client, namespace, name string) {
	t.Helper()
	if _, err := client.Delete(context.Background(), etcdlayout.Layout{}.Service(namespace, name)); err != nil {
		t.Fatal(err)
	}
}

// WaitListed waits until the server lists the Service (its cache follows etcd).
func WaitListed(t testing.TB, srv *testserver.Server, namespace, name string, present bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := srv.Client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		found := slices.ContainsFunc(list.Items, func(s corev1.Service) bool { return s.Name == name })
		return found == present, nil
	})
	if err != nil {
		t.Fatalf("service %s/%s listed=%v: %v", namespace, name, present, err)
	}
}

// CreateConcurrently creates the Services newService(1..n) in namespace
// default with clients concurrent clients, and fails the test on the first
// error.
func CreateConcurrently(t testing.TB, client kubernetes.Interface, n, clients int, newService func(i int) *corev1.Service) {
	t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				svc := newService(i)
				if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create %s: %w", svc.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
