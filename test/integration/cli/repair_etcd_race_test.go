package cli_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestRepairReadingEtcdUnderChurn: the repair job given etcd, fixing (not a
// dry run) with a one-second orphan grace, runs over and over while four
// clients create and delete NodePort Services through the server. Its
// IPAddress pass works from the Services the node-port pass read before it
// (repair.ServicesHandoff), a snapshot seconds older than etcd by the time
// it acts; what it deletes or creates it reads again first, and it waits
// for the server's writes in flight. Once the churn stops (a create cut
// off by the stop may still land) and the job has run once more, every
// stored Service holds an IPAddress and a node port of its own and nothing
// is held without a Service (invariants.Check, leaks included).
func TestRepairReadingEtcdUnderChurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/22", Model: "ipaddress", Etcd: etcd})
	services := srv.Client.CoreV1().Services("default")

	churning, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var created atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 150 && churning.Err() == nil; i++ {
				name := fmt.Sprintf("churn-%d-%d", w, i)
				_, err := services.Create(churning, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
				if err == nil {
					created.Add(1)
				}
				if err == nil && i%2 == 0 {
					_ = services.Delete(churning, name, metav1.DeleteOptions{})
				}
			}
		})
	}
	// The job starts once the churn has: a first pass over an empty
	// cluster would race nothing.
	for created.Load() < 40 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	job := []string{"repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress", "-o", "json",
		"--etcd-servers", strings.Join(etcd.Endpoints(), ","), "--orphan-grace", "1s"}
	for run := range 3 {
		start, before := time.Now(), created.Load()
		out, errOut, code := runApp(t, job...)
		if code != 0 && code != 2 {
			t.Fatalf("repair under churn: exit %d\n%s%s", code, out, errOut)
		}
		after := created.Load()
		t.Logf("repair %d: %v, %d Services created meanwhile", run, time.Since(start).Round(time.Millisecond), after-before)
		if run == 0 && after == before {
			t.Fatal("no Service was created while the first repair ran: the test raced nothing")
		}
	}
	stop()
	wg.Wait()

	var rep *invariants.Report
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		// The job frees what is left over (an orphan older than its grace,
		// once no write that may claim it is in flight) and fails nothing.
		if out, errOut, code := runApp(t, job...); code != 0 && code != 2 {
			t.Fatalf("repair after the churn: exit %d\n%s%s", code, out, errOut)
		}
		var err error
		if rep, err = invariants.Check(ctx, etcd.Client().KV, etcdlayout.Layout{Prefix: "/registry"}, model.IPAddress); err != nil {
			t.Fatal(err)
		}
		if rep.OK() && len(rep.Leaked) == 0 {
			break
		}
	}
	if !rep.OK() || len(rep.Leaked) > 0 {
		t.Fatalf("after the churn and the repairs:\n%s", rep)
	}
	t.Logf("invariants after the churn: %s", rep.Summary())
}
