package fault

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// The late-write scenario: a replica whose only etcd endpoint is a member
// that delays every Service write by lateDelay while its connection stays
// open (so the replica cannot close its fences either: they queue behind),
// and a second replica, on a direct endpoint, whose repair runs every
// second with a grace of lateGrace, far shorter than lateDelay. Clients of
// the first replica create NodePort Services and give up after
// lateTimeout; their writes land lateDelay later. Meanwhile the second
// replica's repair sees their reservations held by no Service for longer
// than its grace, and clients of the second replica fill the node-port
// range and then the ClusterIP range. A reservation the repair freed is
// handed to a fill Service, and the late write that lands after it makes a
// duplicate; the repair must wait for the writer's write lease instead.
const (
	lateDelay     = 10 * time.Second
	lateTimeout   = 1500 * time.Millisecond
	lateGrace     = 2 * time.Second
	lateLease     = 20 * time.Second // the writer's write lease: longer than lateDelay
	lateCreates   = 4
	latePorts     = "30000-30019"
	lateServiceIP = "10.96.0.0/26"
)

// TestLateWriteAfterRepairGrace runs the late-write scenario in both models
// and asserts no ClusterIP or node port held twice, every stored Service's
// reservations held, and that the test did what it says: some late create
// was stored, after the fills.
func TestLateWriteAfterRepairGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and waits for delayed writes; not in -short")
	}
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		t.Run(string(m), func(t *testing.T) { lateWrite(t, m) })
	}
}

func lateWrite(t *testing.T, m model.Name) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	proxy := etcd.Proxy(t)
	writer := testserver.Start(t, testserver.Options{
		Etcd: etcd, Model: string(m), ServiceRange: lateServiceIP,
		Configure: func(c *apiserver.Config) { c.WriteLeaseTTL = lateLease },
		Flags: func(o *apiserver.Options) {
			o.EtcdServers = []string{proxy.URL()}
			o.ServiceNodePortRange = latePorts
		},
	})
	repairer := testserver.Start(t, testserver.Options{
		Etcd: etcd, Model: string(m), ServiceRange: lateServiceIP, WithRepair: true,
		Configure: func(c *apiserver.Config) { c.RepairGrace = lateGrace },
		Flags: func(o *apiserver.Options) {
			o.ServiceNodePortRange = latePorts
			o.RepairInterval = time.Second
		},
	})
	direct, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })

	// The writer's creates: every Service write reaches etcd lateDelay late.
	slow := clientWithTimeout(t, writer.RESTConfig, lateTimeout)
	proxy.Set(faultproxy.Fault{Delay: lateDelay, Direction: faultproxy.ToTarget,
		Match: [][]byte{[]byte(etcdlayout.Layout{}.ServicesPrefix())}})
	sent := time.Now()
	var wg sync.WaitGroup
	for i := range lateCreates {
		wg.Go(func() {
			name := fmt.Sprintf("late-%d", i)
			if _, err := slow.CoreV1().Services(namespace).Create(ctx, newService(name, shape{typ: corev1.ServiceTypeNodePort}), metav1.CreateOptions{}); err == nil {
				t.Logf("%s: acknowledged", name)
			}
		})
	}
	wg.Wait()

	// Past the repair's grace and several of its passes, the other replica
	// fills both ranges.
	time.Sleep(time.Until(sent.Add(lateGrace + 4*time.Second)))
	fast := []kubernetes.Interface{clientWithTimeout(t, repairer.RESTConfig, fillTimeout)}
	l := newLedger()
	ports := fill(ctx, fast, l, "fill-ports", shape{typ: corev1.ServiceTypeNodePort}, 100)
	ips := fill(ctx, fast, l, "fill-ips", shape{typ: corev1.ServiceTypeClusterIP}, 100)
	filled := time.Now()
	if !ports.full || !ips.full {
		t.Fatalf("the fills did not fill the ranges: node ports %+v, ClusterIPs %+v", ports, ips)
	}
	if filled.After(sent.Add(lateDelay)) {
		t.Logf("the fills ended %v after the late writes were sent, after they may have landed: the case may check less", filled.Sub(sent).Round(time.Millisecond))
	}

	// The late writes land; the writer settles them in the background. The
	// fault stays until they have arrived: a Set releases what it queued at
	// once, with the cancellations right behind their requests.
	time.Sleep(time.Until(sent.Add(lateDelay + 2*time.Second)))
	proxy.Set(faultproxy.Fault{})
	if !waitQuiet(ctx, direct, etcdlayout.Layout{}, quiet, time.Minute) {
		t.Log("etcd's Service and allocation keys still changed a minute after the late writes")
	}
	report, err := invariants.Check(ctx, direct, etcdlayout.Layout{}, m)
	if err != nil {
		t.Fatal(err)
	}
	late := 0
	for i := range lateCreates {
		if _, ok := report.Services[fmt.Sprintf("%s/late-%d", namespace, i)]; ok {
			late++
		}
	}
	t.Logf("%s: %d of %d late creates stored; fills: %d node-port Services, %d ClusterIP Services; %s",
		m, late, lateCreates, ports.created, ips.created, report)
	if late == 0 {
		t.Error("no late create was stored: the scenario tested nothing (the writes never landed)")
	}
	if !report.OK() {
		t.Errorf("the stored state breaks the invariants:\n%s", report)
	}
}
