package servicealloc

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/warning"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"

	"github.com/allocator/allocator/pkg/bitmap"
)

// TestDryRunPicksDistinctPorts: a dry-run create of a LoadBalancer with
// externalTrafficPolicy Local picks a nodePort and a healthCheckNodePort
// that differ, as the real request's do, although the dry-run view reserves
// nothing. The range has three ports, one taken: the two free ones are the
// only answer, and a dry run that could repeat a pick does so about every
// other time.
func TestDryRunPicksDistinctPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ports := newNodePorts(t, "30000-30002")
	if err := ports.Allocate(ctx, 30001); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Allocators: []allocation.Interface{newMem("10.0.0.0/24")}, NodePorts: ports})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		svc := &corev1.Service{Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "a", Port: 80, Protocol: corev1.ProtocolTCP}},
		}}
		if err := a.allocateNodePortsCreate(ctx, &Transaction{a: a}, svc, true); err != nil {
			t.Fatalf("dry run %d: %v", i, err)
		}
		node, health := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
		if node == health || node == 30001 || health == 30001 {
			t.Fatalf("dry run %d picked nodePort %d and healthCheckNodePort %d; want 30000 and 30002, in either order", i, node, health)
		}
	}
	if used, err := ports.Has(ctx, 30000); err != nil || used {
		t.Errorf("a dry run reserved port 30000 (%v, %v)", used, err)
	}
}

// newNodePorts returns the node-port map of spec on a real etcd of the
// test's own, created.
func newNodePorts(t *testing.T, spec string) *nodeport.EtcdAllocator {
	t.Helper()
	ports, err := nodeport.NewEtcd(etcdtest.New(t).Client(), etcdlayout.Layout{}.ServiceNodePortRange(), nodeport.MustParse(spec), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ports.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ports
}

// recordWarnings keeps the warnings a request's handler adds.
type recordWarnings struct{ texts []string }

func (r *recordWarnings) AddWarning(_, text string) { r.texts = append(r.texts, text) }

// TestNodePortsFullHint: a NodePort Service that finds every node port
// taken fails with kube-apiserver's "failed to allocate a nodePort: range is
// full", and the client gets a warning beside it naming the range and what
// makes room, as for a full ClusterIP range; a dry run answers the same.
func TestNodePortsFullHint(t *testing.T) {
	t.Parallel()
	ports := newNodePorts(t, "30000-30001")
	for _, p := range []int{30000, 30001} {
		if err := ports.Allocate(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(Config{Allocators: []allocation.Interface{newMem("10.0.0.0/24")}, NodePorts: ports})
	if err != nil {
		t.Fatal(err)
	}
	for _, dryRun := range []bool{false, true} {
		seen := &recordWarnings{}
		ctx := warning.WithWarningRecorder(context.Background(), seen)
		svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "a", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		err := a.allocateNodePortsCreate(ctx, &Transaction{a: a}, svc, dryRun)
		if !apierrors.IsInternalError(err) || !strings.HasSuffix(err.Error(), "failed to allocate a nodePort: range is full") {
			t.Errorf("dry run %v: %v, want kube-apiserver's \"failed to allocate a nodePort: range is full\"", dryRun, err)
		}
		want := "the node-port range 30000-30001 (--service-node-port-range) has no free port"
		if len(seen.texts) != 1 || !strings.Contains(seen.texts[0], want) {
			t.Errorf("dry run %v: warnings %q, want one containing %q", dryRun, seen.texts, want)
		}
	}
}
