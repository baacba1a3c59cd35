package servicealloc

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// newEtcdAllocators returns real etcd-backed bitmap allocators, one per
// prefix, on a fresh etcd member.
func newEtcdAllocators(t *testing.T, prefixes ...string) []*clusterip.EtcdAllocator {
	t.Helper()
	etcd := etcdtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*clusterip.EtcdAllocator
	for i, p := range prefixes {
		rng := subrange.MustNew(netip.MustParsePrefix(p), model.Bitmap)
		key := "/registry/ranges/serviceips"
		if i > 0 {
			key = "/registry/ranges/secondaryserviceips"
		}
		a, err := clusterip.NewEtcdAllocator(etcd.Client(), key, rng, bitmap.EtcdOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func mustHave(t *testing.T, a allocation.Interface, ip string, want bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := a.Has(ctx, netip.MustParseAddr(ip))
	if err != nil {
		t.Fatalf("Has(%s): %v", ip, err)
	}
	if got != want {
		t.Fatalf("Has(%s) = %v, want %v", ip, got, want)
	}
}

// cancelOnAllocate wraps a real allocator: its Allocate cancels the request
// context and then fails, as when the client goes away while the second
// family of a dual-stack Service is being reserved.
type cancelOnAllocate struct {
	allocation.Interface
	cancel context.CancelFunc
}

func (c cancelOnAllocate) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	c.cancel()
	return c.Interface.Allocate(ctx, ip, owner)
}

// TestReleasesOutliveTheRequest proves that rollbacks and settlements release
// on real etcd-backed allocators even when the request's context is already
// cancelled (the client disconnected or the deadline hit). Released on the
// request's context, each case would leak its address: the bitmap queue
// refuses a dead context.
func TestReleasesOutliveTheRequest(t *testing.T) {
	t.Parallel()
	allocs := newEtcdAllocators(t, "10.0.0.0/24", "fd00::/120")
	v4, v6 := allocs[0], allocs[1]
	a, err := New(Config{Allocators: []allocation.Interface{v4, v6}})
	if err != nil {
		t.Fatal(err)
	}
	dead, kill := context.WithCancel(context.Background())
	kill()
	if err := v4.Release(dead, netip.MustParseAddr("10.0.0.1"), allocation.Owner{}); err == nil {
		t.Fatal("the bitmap queue accepted a cancelled context; this test would prove nothing")
	}

	t.Run("revert of a failed create", func(t *testing.T) {
		s := svc(func(s *corev1.Service) { s.Name = "revert"; s.Spec.ClusterIP = "10.0.0.10" })
		if err := a.PrepareCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(context.Background(), s, false)
		if err != nil {
			t.Fatal(err)
		}
		mustHave(t, v4, "10.0.0.10", true)
		txn.Revert(dead)
		mustHave(t, v4, "10.0.0.10", false)
	})

	t.Run("commit of dual to single", func(t *testing.T) {
		old := svc(func(s *corev1.Service) {
			s.Name = "down"
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.ClusterIPs = []string{"10.0.0.11", "fd00::11"}
			s.Spec.ClusterIP = "10.0.0.11"
		})
		if err := a.PrepareCreate(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(context.Background(), old, false)
		if err != nil {
			t.Fatal(err)
		}
		txn.Commit(context.Background())
		s := old.DeepCopy()
		s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
		if err := a.PrepareUpdate(context.Background(), s, old); err != nil {
			t.Fatal(err)
		}
		txn, err = a.AllocateUpdate(context.Background(), s, old, false)
		if err != nil {
			t.Fatal(err)
		}
		txn.Commit(dead)
		mustHave(t, v6, "fd00::11", false)
		mustHave(t, v4, "10.0.0.11", true)
	})

	t.Run("failure path of a dual-stack create", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wrapped, err := New(Config{Allocators: []allocation.Interface{v4, cancelOnAllocate{Interface: v6, cancel: cancel}}})
		if err != nil {
			t.Fatal(err)
		}
		s := svc(func(s *corev1.Service) {
			s.Name = "dual"
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.ClusterIPs = []string{"10.0.0.12", "fd00::12"}
			s.Spec.ClusterIP = "10.0.0.12"
		})
		if err := wrapped.PrepareCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		_, err = wrapped.AllocateCreate(ctx, s, false)
		if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("AllocateCreate = %v (ctx %v), want a failure on the cancelled request", err, ctx.Err())
		}
		mustHave(t, v4, "10.0.0.12", false)
		mustHave(t, v6, "fd00::12", false)
	})
}
