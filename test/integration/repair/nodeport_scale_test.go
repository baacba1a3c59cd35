package repair_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"

	"github.com/allocator/allocator/pkg/bitmap"
)

// TestNodePortScaleTiming measures a node-port repair pass over N NodePort
// Services (NODEPORT_SCALE=N, skipped when unset; the node-port range is
// 30000-62767 so up to 32,768 fit). A measurement, not a speed check: it
// asserts only that the pass finds the map consistent.
//
//	NODEPORT_SCALE=20000 go test -run TestNodePortScaleTiming -v -timeout 30m ./test/integration/repair/
func TestNodePortScaleTiming(t *testing.T) {
	t.Parallel()
	n, err := strconv.Atoi(os.Getenv("NODEPORT_SCALE"))
	if err != nil || n <= 0 {
		t.Skip("set NODEPORT_SCALE=N to measure the node-port repair on N NodePort Services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rng := nodeport.MustParse("30000-62767")
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/16", Configure: func(c *apiserver.Config) { c.NodePortRange = rng }})
	start := time.Now()
	repairtest.CreateConcurrently(t, srv.Client, n, 32, func(i int) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("np-%05d", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
	})
	t.Logf("created %d NodePort Services in %v", n, time.Since(start))
	store, err := nodeport.NewEtcd(srv.Etcd.Client(), etcdlayout.Layout{}.ServiceNodePortRange(), rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := repair.NewNodePortRepair(repair.NodePortConfig{Options: repair.Options{Client: srv.Client}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 3; pass++ {
		start = time.Now()
		rep, err := r.RunOnce(ctx)
		if err != nil || !rep.Consistent() || rep.Allocated != n {
			t.Fatalf("node-port repair: %v %v", err, rep)
		}
		t.Logf("node-port repair pass %d, %d NodePort Services: %v", pass, n, time.Since(start))
	}
}
