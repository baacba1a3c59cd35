package repair_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// testRange is the node-port range the findings are taken on.
const testRange = "30000-30099"

// fakeStore is a stored map whose first writes lose to a concurrent
// allocation: each lost write is followed by a read of the next map in reads.
type fakeStore struct {
	reads  []bitmap.StoredMap
	losses int
	wrote  [][]byte
}

func (s *fakeStore) ReadStored(context.Context) (bitmap.StoredMap, error) {
	m := s.reads[0]
	s.reads = s.reads[1:]
	return m, nil
}

func (s *fakeStore) CompareAndWrite(_ context.Context, data []byte, _ bitmap.StoredMap) (int64, error) {
	if s.losses > 0 {
		s.losses--
		return 0, bitmap.ErrConflict
	}
	s.wrote = append(s.wrote, data)
	return 1, nil
}

func nodePortService(name string, port int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: port}}}}
}

// TestFinish: the findings of a committed pass are counted and raise events
// (a Service's with a Reason only), less the Missing findings of keys the
// commit found set in the fresh map; a dry run commits, counts and records
// nothing and returns every finding.
func TestFinish(t *testing.T) {
	t.Parallel()
	a, b, c := nodePortService("a", 30001), nodePortService("b", 30002), nodePortService("c", 30001)
	missing := func(svc *corev1.Service, port string) report.Problem {
		return report.Problem{Type: report.TypeRepair, Reason: "PortNotAllocated", IP: port, Service: report.ServiceKey(svc), Message: "missing " + port, Resource: repair.ResourceNodePort}
	}
	dup := report.Problem{Type: report.TypeDuplicate, Reason: "PortAlreadyAllocated", IP: "30001", Service: "default/c", Message: "duplicate", Resource: repair.ResourceNodePort}
	leak := report.Problem{Type: report.TypeLeak, IP: "30009", Message: "leak", Resource: repair.ResourceNodePort}
	for _, dryRun := range []bool{false, true} {
		store := &fakeStore{
			reads: []bitmap.StoredMap{
				{Revision: 1},                     // the pass's read: empty
				{Revision: 2, Data: []byte{0x02}}, // 30001 set since the pass's read
			},
			losses: 1,
		}
		r, err := repair.New(repair.Config[int]{
			Options: repair.Options{Client: fake.NewClientset(b), LeakGrace: time.Minute},
			Store:   store, Space: repair.PortSpace{Range: nodeport.MustParse(testRange)},
		})
		if err != nil {
			t.Fatal(err)
		}
		pass, err := r.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var found repair.Findings[int]
		for _, svc := range []*corev1.Service{a, b, c} {
			port := int(svc.Spec.Ports[0].NodePort)
			switch pass.Hold(svc, port) {
			case repair.Missing:
				found.AddMissing(svc, port, missing(svc, strconv.Itoa(port)))
			case repair.Duplicate:
				found.Add(svc, dup)
			}
		}
		found.Add(nil, leak)
		pass.Leaks()

		m := report.NewMetrics()
		registry := metrics.NewKubeRegistry()
		m.Register(registry)
		recorder := record.NewFakeRecorder(10)
		done, err := pass.Finish(context.Background(), &found, repair.Reporting{DryRun: dryRun, Metrics: m, Recorder: recorder})
		if err != nil {
			t.Fatal(err)
		}
		close(recorder.Events)
		var events []string
		for e := range recorder.Events {
			events = append(events, e)
		}
		want := repair.Finished{Problems: []report.Problem{missing(b, "30002"), dup, leak}, Allocated: 2, Wrote: true}
		wantEvents := []string{"Warning PortNotAllocated missing 30002", "Warning PortAlreadyAllocated duplicate"}
		// The kept leak counts nothing (a leak counts once, when freed); the
		// findings are node-port ones, so they count on the node-port counters.
		wantObserved := `
# HELP apiserver_nodeport_repair_port_errors_total [ALPHA] Number of errors detected on ports by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown
# TYPE apiserver_nodeport_repair_port_errors_total counter
apiserver_nodeport_repair_port_errors_total{type="duplicate"} 1
apiserver_nodeport_repair_port_errors_total{type="repair"} 1
`
		if dryRun {
			want = repair.Finished{Problems: []report.Problem{missing(a, "30001"), missing(b, "30002"), dup, leak}, Allocated: 2}
			wantEvents, wantObserved = nil, ""
		}
		if diff := cmp.Diff(want, done); diff != "" {
			t.Errorf("dry run %v: Finish (-want +got):\n%s", dryRun, diff)
		}
		if err := testutil.GatherAndCompare(registry, strings.NewReader(wantObserved), "apiserver_nodeport_repair_port_errors_total", "apiserver_clusterip_repair_ip_errors_total"); err != nil {
			t.Errorf("dry run %v: metrics: %v", dryRun, err)
		}
		if diff := cmp.Diff(wantEvents, events); diff != "" {
			t.Errorf("dry run %v: events (-want +got):\n%s", dryRun, diff)
		}
		if wantWrites := map[bool]int{false: 1, true: 0}[dryRun]; len(store.wrote) != wantWrites {
			t.Errorf("dry run %v: %d writes, want %d", dryRun, len(store.wrote), wantWrites)
		}
	}
}
