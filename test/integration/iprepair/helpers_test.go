package iprepair_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/testserver"
)

// raceCreatesWithPasses creates rounds × writers × perWriter Services through
// the API while pass runs back to back, and returns every Service's primary
// IP by name once all are created, failing on a duplicate.
func raceCreatesWithPasses(t *testing.T, ctx context.Context, srv *testserver.Server, pass func(context.Context) error, rounds, writers, perWriter int) map[string]string {
	t.Helper()
	for round := range rounds {
		stop := make(chan struct{})
		passes := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					passes <- nil
					return
				default:
				}
				if err := pass(ctx); err != nil {
					passes <- err
					return
				}
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, writers*perWriter)
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					if _, err := createService(ctx, srv, fmt.Sprintf("r%d-w%d-%d", round, w, i), ""); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		if err := <-passes; err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	byIP := servicesByIP(t, ctx, srv.Client)
	if want := rounds*writers*perWriter + 1; len(byIP) != want { // + kubernetes
		t.Fatalf("%d services, want %d", len(byIP), want)
	}
	return byIP
}

// servicesByIP lists every Service and maps its ClusterIP to namespace/name,
// failing the test if two Services share one.
func servicesByIP(t *testing.T, ctx context.Context, client kubernetes.Interface) map[string]string {
	t.Helper()
	services, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, svc := range services.Items {
		ip := svc.Spec.ClusterIP
		if other, dup := byIP[ip]; dup {
			t.Fatalf("%s held by %s and %s", ip, other, svc.Name)
		}
		byIP[ip] = svc.Namespace + "/" + svc.Name
	}
	return byIP
}
