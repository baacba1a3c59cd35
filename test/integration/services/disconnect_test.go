package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/model"
)

// slowAfterReserve reserves at once and then takes a while before returning,
// as a create does whose admission webhooks are slow: the client gives up
// while the address is reserved and the Service not yet stored.
type slowAfterReserve struct {
	allocation.Interface
	delay time.Duration
}

func (s slowAfterReserve) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	err := s.Interface.Allocate(ctx, ip, owner)
	time.Sleep(s.delay)
	return err
}

// TestClientDisconnectsMidAllocation: clients with a 150 ms timeout create
// Services whose address reservation takes 600 ms; the requests are cancelled
// while their addresses are reserved. Once the server is done with them,
// each address is allocated if and only if its Service was stored. Before
// releases were detached from the request's context, the rollback ran on the
// dead context, the bitmap queue refused it, and every address leaked.
func TestClientDisconnectsMidAllocation(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		inner allocation.Interface
	)
	srv := testserver.Start(t, testserver.Options{
		ServiceRange: "10.0.0.0/24",
		Model:        string(model.Bitmap),
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			mu.Lock()
			inner = a
			mu.Unlock()
			return slowAfterReserve{Interface: a, delay: 600 * time.Millisecond}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	impatient := *srv.RESTConfig
	impatient.Timeout = 150 * time.Millisecond
	client, err := kubernetes.NewForConfig(&impatient)
	if err != nil {
		t.Fatal(err)
	}

	const n = 6
	var wg sync.WaitGroup
	timedOut := make(chan struct{}, n)
	for i := range n {
		wg.Go(func() {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gone-%d", i)},
				Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.0.0.%d", 100+i),
					Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
			}
			_, err := client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{})
			if err == nil {
				t.Logf("create %s finished within the client's timeout", svc.Name)
			} else {
				timedOut <- struct{}{}
			}
		})
	}
	wg.Wait()
	if len(timedOut) == 0 {
		t.Fatal("no client gave up mid-allocation: the test proves nothing")
	}

	mu.Lock()
	alloc := inner
	mu.Unlock()
	// The server finishes each request after the client left; give it time,
	// then every address must agree with its Service.
	consistent := func() (bool, string) {
		for i := range n {
			name, ip := fmt.Sprintf("gone-%d", i), netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", 100+i))
			_, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			stored := err == nil
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			has, err := alloc.Has(ctx, ip)
			if err != nil {
				return false, err.Error()
			}
			if has != stored {
				return false, fmt.Sprintf("%s: Service stored %v, address allocated %v", ip, stored, has)
			}
		}
		return true, ""
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, why := consistent()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the clients disconnected: %s", why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
