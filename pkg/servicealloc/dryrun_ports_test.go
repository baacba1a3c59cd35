package servicealloc

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
