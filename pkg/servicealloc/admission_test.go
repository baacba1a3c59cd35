package servicealloc

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allocator/allocator/pkg/allocation"
)

// TestStartClosed: a closed Allocator refuses every reservation, of an
// address or a node port, dry runs included, with 503 and Retry-After, and
// reserves nothing; releases go through; after Open everything proceeds.
func TestStartClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ports := newNodePorts(t, "30000-30010")
	mem := newMem("10.0.0.0/24")
	a, err := New(Config{Allocators: []allocation.Interface{mem}, NodePorts: ports, StartClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	want503 := func(what string, err error) {
		t.Helper()
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s while closed: %v, want 503", what, err)
			return
		}
		if d, ok := apierrors.SuggestsClientDelay(err); !ok || d < 1 {
			t.Errorf("%s while closed: no Retry-After: %v", what, err)
		}
	}
	for _, tt := range []struct {
		name   string
		ip     string
		dryRun bool
	}{{"dynamic", "", false}, {"static", "10.0.0.5", false}, {"dry run", "", true}, {"static dry run", "10.0.0.5", true}} {
		s := svc(func(s *corev1.Service) { s.Spec.ClusterIP = tt.ip })
		if err := a.PrepareCreate(ctx, s); err != nil {
			t.Fatal(err)
		}
		_, err := a.AllocateCreate(ctx, s, tt.dryRun)
		want503(tt.name, err)
	}
	if len(mem.used) != 0 {
		t.Fatalf("a closed allocator reserved %v", mem.used)
	}
	txn := &Transaction{a: a}
	if err := a.reservePort(ctx, txn, ports, 30005, false); !errors.Is(err, allocation.ErrNotReady) {
		t.Errorf("node port 30005 while closed: %v, want ErrNotReady", err)
	}
	if _, err := a.reserveNextPort(ctx, txn, ports, false); !errors.Is(err, allocation.ErrNotReady) {
		t.Errorf("next node port while closed: %v, want ErrNotReady", err)
	}
	if u, err := ports.Usage(ctx); err != nil || u.Used != 0 {
		t.Errorf("node ports used while closed: %+v, %v", u, err)
	}

	// A release is never refused: a delete while closed frees its address
	// and node port.
	held := netip.MustParseAddr("10.0.0.9")
	if err := mem.Allocate(ctx, held, allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	if err := ports.Allocate(ctx, 30009); err != nil {
		t.Fatal(err)
	}
	a.Release(ctx, svc(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ClusterIP, s.Spec.ClusterIPs = held.String(), []string{held.String()}
		s.Spec.Ports[0].NodePort = 30009
	}))
	if has, _ := mem.Has(ctx, held); has {
		t.Error("release refused while closed: address still held")
	}
	if has, _ := ports.Has(ctx, 30009); has {
		t.Error("release refused while closed: node port still held")
	}

	a.Open()
	a.Open() // idempotent
	s := svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	if err := a.PrepareCreate(ctx, s); err != nil {
		t.Fatal(err)
	}
	created, err := a.AllocateCreate(ctx, s, false)
	if err != nil {
		t.Fatalf("create after Open: %v", err)
	}
	created.Commit(ctx)
	if s.Spec.ClusterIP == "" || s.Spec.Ports[0].NodePort == 0 {
		t.Errorf("after Open: clusterIP %q, nodePort %d", s.Spec.ClusterIP, s.Spec.Ports[0].NodePort)
	}
}
