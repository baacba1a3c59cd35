package fault

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/apiserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestLostDeleteReleases: a NodePort Service's delete whose answer is lost
// (the client gives up after 500 ms while every byte naming the Service
// reaches etcd 1.5 s late) is applied later; the server learns that through
// the request's fence and releases the Service's ClusterIP and node port,
// as for any delete, without waiting for a repair. In both models, on a
// server whose only etcd endpoint is the proxy.
func TestLostDeleteReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers; not in -short")
	}
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		t.Run(string(m), func(t *testing.T) { lostDelete(t, m) })
	}
}

func lostDelete(t *testing.T, m model.Name) {
	const delay = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	proxy, err := faultproxy.Start(strings.TrimPrefix(etcd.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	s := testserver.Start(t, testserver.Options{
		Etcd:         etcd,
		Model:        string(m),
		ServiceRange: "10.96.0.0/24",
		Flags: func(o *apiserver.Options) {
			o.EtcdServers = []string{proxy.URL()}
			o.ServiceNodePortRange = nodePortRange
		},
	})
	direct, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	layout := etcdlayout.Layout{}
	fast := clientWithTimeout(t, s.RESTConfig, fillTimeout)
	slow := clientWithTimeout(t, s.RESTConfig, 500*time.Millisecond)

	svc := newService("lost", shape{typ: corev1.ServiceTypeNodePort})
	created, err := fast.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created %s with ClusterIP %s, node port %d", created.Name, created.Spec.ClusterIP, created.Spec.Ports[0].NodePort)

	key := layout.Service(namespace, "lost")
	proxy.Set(faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget, Match: [][]byte{[]byte(key)}})
	err = slow.CoreV1().Services(namespace).Delete(ctx, "lost", metav1.DeleteOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("delete through the slow path answered %v, want its answer lost (a timeout)", err)
	}
	t.Logf("delete answered: %v", err)

	// The delete lands, the server learns it and releases: no reservation
	// is left, with no repair running.
	var report *invariants.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		report, err = invariants.Check(ctx, direct, layout, m)
		if err != nil {
			t.Fatal(err)
		}
		gone, err := direct.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if gone.Count == 0 && report.OK() && len(report.Leaked) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the lost delete: Service stored %v, reservations:\n%s", gone.Count > 0, report)
		}
		time.Sleep(200 * time.Millisecond)
	}
	proxy.Set(faultproxy.Fault{})

	// What it held is free: a Service asking for the same address and port
	// gets them.
	again := newService("again", shape{typ: corev1.ServiceTypeNodePort})
	again.Spec.ClusterIP, again.Spec.ClusterIPs = created.Spec.ClusterIP, created.Spec.ClusterIPs
	again.Spec.Ports[0].NodePort = created.Spec.Ports[0].NodePort
	if _, err := fast.CoreV1().Services(namespace).Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create with the deleted Service's ClusterIP and node port: %v", err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
