package repair_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// testRange is the node-port range the findings are taken on.
const testRange = "30000-30099"

// portSpace is a port range as a repair.Space.
type portSpace struct{ nodeport.Range }

func (s portSpace) Key(i int) int {
	port, _ := s.Port(i)
	return port
}

func holdsPort(svc *corev1.Service, port int) bool {
	return slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int(p.NodePort) == port })
}

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
		return report.Problem{Type: report.TypeRepair, Reason: "PortNotAllocated", IP: port, Service: report.ServiceKey(svc), Message: "missing " + port}
	}
	dup := report.Problem{Type: report.TypeDuplicate, Reason: "PortAlreadyAllocated", IP: "30001", Service: "default/c", Message: "duplicate"}
	leak := report.Problem{Type: report.TypeLeak, IP: "30009", Message: "leak"}
	for _, dryRun := range []bool{false, true} {
		store := &fakeStore{
			reads:  []bitmap.StoredMap{{Revision: 2, Data: []byte{0x02}}}, // 30001 set since the pass's read
			losses: 1,
		}
		r, err := repair.New(repair.Config[int]{
			Store: store, Space: portSpace{nodeport.MustParse(testRange)}, Services: fake.NewClientset(b).CoreV1(),
			Holds: holdsPort, LeakGrace: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		pass, err := r.Begin(bitmap.StoredMap{Revision: 1})
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
		pass.Leaked(func(int, bool) {})

		var observed []report.Problem
		recorder := record.NewFakeRecorder(10)
		done, err := pass.Finish(context.Background(), &found, repair.Reporting{DryRun: dryRun,
			Observe: func(p report.Problem) { observed = append(observed, p) }, Recorder: recorder})
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
		wantObserved := want.Problems
		if dryRun {
			want = repair.Finished{Problems: []report.Problem{missing(a, "30001"), missing(b, "30002"), dup, leak}, Allocated: 2}
			wantEvents, wantObserved = nil, nil
		}
		if diff := cmp.Diff(want, done); diff != "" {
			t.Errorf("dry run %v: Finish (-want +got):\n%s", dryRun, diff)
		}
		if diff := cmp.Diff(wantObserved, observed); diff != "" {
			t.Errorf("dry run %v: observed (-want +got):\n%s", dryRun, diff)
		}
		if diff := cmp.Diff(wantEvents, events); diff != "" {
			t.Errorf("dry run %v: events (-want +got):\n%s", dryRun, diff)
		}
		if wantWrites := map[bool]int{false: 1, true: 0}[dryRun]; len(store.wrote) != wantWrites {
			t.Errorf("dry run %v: %d writes, want %d", dryRun, len(store.wrote), wantWrites)
		}
	}
}
