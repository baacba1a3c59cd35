package servicealloc

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/pkg/allocation"
)

func svc(mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "1"},
		// As decoding defaults it (internal/apiserver/defaults.go).
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			Selector:              map[string]string{"app": "web"},
			Ports:                 []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}},
			SessionAffinity:       corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func newAlloc(t testing.TB, ranges ...string) (*Allocator, []*memAllocator) {
	t.Helper()
	var mems []*memAllocator
	var ifaces []allocation.Interface
	for _, r := range ranges {
		m := newMem(r)
		mems = append(mems, m)
		ifaces = append(ifaces, m)
	}
	a, err := New(Config{Allocators: ifaces})
	if err != nil {
		t.Fatal(err)
	}
	return a, mems
}

func TestPrepareCreate(t *testing.T) {
	t.Parallel()
	single := []string{"10.0.0.0/24"}
	dual := []string{"10.0.0.0/24", "fd00::/120"}
	tests := []struct {
		name         string
		ranges       []string
		svc          *corev1.Service
		wantPolicy   corev1.IPFamilyPolicy
		wantFamilies []corev1.IPFamily
		wantErr      string
	}{
		{name: "default single", ranges: single, svc: svc(),
			wantPolicy: corev1.IPFamilyPolicySingleStack, wantFamilies: []corev1.IPFamily{"IPv4"}},
		{name: "prefer on single", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack) }),
			wantPolicy: corev1.IPFamilyPolicyPreferDualStack, wantFamilies: []corev1.IPFamily{"IPv4"}},
		{name: "require on single", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack) }),
			wantErr: "this cluster is not configured for dual-stack services"},
		{name: "v6 family on v4 cluster", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{"IPv6"} }),
			wantErr: "spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"},
		{name: "v6 ip on v4 cluster", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "fd00::5" }),
			wantErr: "IPv6 is not configured on this cluster"},
		{name: "require on dual", ranges: dual, svc: svc(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack) }),
			wantPolicy: corev1.IPFamilyPolicyRequireDualStack, wantFamilies: []corev1.IPFamily{"IPv4", "IPv6"}},
		{name: "prefer v6 first on dual", ranges: dual, svc: svc(func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
			s.Spec.IPFamilies = []corev1.IPFamily{"IPv6"}
		}), wantPolicy: corev1.IPFamilyPolicyPreferDualStack, wantFamilies: []corev1.IPFamily{"IPv6", "IPv4"}},
		{name: "families inferred from IPs", ranges: dual, svc: svc(func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.ClusterIPs = []string{"fd00::5", "10.0.0.5"}
			s.Spec.ClusterIP = "fd00::5"
		}), wantPolicy: corev1.IPFamilyPolicyRequireDualStack, wantFamilies: []corev1.IPFamily{"IPv6", "IPv4"}},
		{name: "two IPs of one family", ranges: dual, svc: svc(func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			s.Spec.ClusterIPs = []string{"10.0.0.5", "10.0.0.6"}
			s.Spec.ClusterIP = "10.0.0.5"
		}), wantErr: "may specify no more than one IP for each IP family"},
		{name: "two IPs single stack", ranges: dual, svc: svc(func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			s.Spec.ClusterIPs = []string{"10.0.0.5", "fd00::5"}
			s.Spec.ClusterIP = "10.0.0.5"
		}), wantErr: "SingleStack"},
		// Its endpoints are the user's, of any family: kube-apiserver gives
		// it both families even on a single-stack cluster.
		{name: "headless selectorless on single", ranges: single, svc: svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = "None"
			s.Spec.Selector = nil
		}), wantPolicy: corev1.IPFamilyPolicyRequireDualStack, wantFamilies: []corev1.IPFamily{"IPv4", "IPv6"}},
		{name: "headless with selector on dual", ranges: dual, svc: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "None" }),
			wantPolicy: corev1.IPFamilyPolicySingleStack, wantFamilies: []corev1.IPFamily{"IPv4"}},
		{name: "non-canonical IP", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "010.0.0.5" }),
			wantErr: "spec.clusterIPs[0]"},
		{name: "mapped IP", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "::ffff:10.0.0.5" }),
			wantErr: "IPv4-mapped"},
		{name: "None not alone", ranges: dual, svc: svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = "None"
			s.Spec.ClusterIPs = []string{"None", "fd00::1"}
		}), wantErr: "'None' must be the first and only value"},
		{name: "ExternalName with policy", ranges: single, svc: svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.com"
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}), wantErr: "may not be set for ExternalName services"},
		{name: "NodePort refused", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }),
			wantErr: "does not allocate node ports"},
		{name: "no ports", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.Ports = nil }),
			wantErr: "spec.ports: Required value"},
		{name: "duplicate port", ranges: single, svc: svc(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 80, Protocol: "TCP"}, {Name: "b", Port: 80, Protocol: "TCP"}}
		}), wantErr: "spec.ports[1]: Duplicate value"},
		{name: "bad selector", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"a b": "c"} }),
			wantErr: "spec.selector"},
		{name: "bad external IP", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"1.2.3"} }),
			wantErr: "spec.externalIPs[0]"},
		{name: "bad protocol", ranges: single, svc: svc(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }),
			wantErr: "spec.ports[0].protocol: Unsupported value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := newAlloc(t, tt.ranges...)
			err := a.PrepareCreate(context.Background(), tt.svc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !apierrors.IsInvalid(err) {
					t.Fatalf("want 422 containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *tt.svc.Spec.IPFamilyPolicy != tt.wantPolicy {
				t.Errorf("policy %s, want %s", *tt.svc.Spec.IPFamilyPolicy, tt.wantPolicy)
			}
			if diff := cmp.Diff(tt.wantFamilies, tt.svc.Spec.IPFamilies); diff != "" {
				t.Errorf("families (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateCreateCommitRevert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, mems := newAlloc(t, "10.0.0.0/24", "fd00::/120")
	s := svc(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack) })
	if err := a.PrepareCreate(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	txn, err := a.AllocateCreate(ctx, s, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.1", "fd00::1"}, s.Spec.ClusterIPs); diff != "" {
		t.Fatalf("clusterIPs (-want +got):\n%s", diff)
	}
	txn.Revert(ctx)
	txn.Commit(ctx) // no effect after Revert
	if len(mems[0].used)+len(mems[1].used) != 0 {
		t.Fatalf("Revert left %v %v", mems[0].used, mems[1].used)
	}

	// A failure on the second family releases the first.
	mems[1].notReady = true
	s2 := svc(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack) })
	if err := a.PrepareCreate(context.Background(), s2); err != nil {
		t.Fatal(err)
	}
	_, err = a.AllocateCreate(ctx, s2, false)
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("want 503, got %v", err)
	}
	status = err.(apierrors.APIStatus)
	if status.Status().Details == nil || status.Status().Details.RetryAfterSeconds < 1 {
		t.Errorf("no Retry-After: %+v", status.Status())
	}
	if len(mems[0].used) != 0 {
		t.Errorf("IPv4 leaked after IPv6 failure: %v", mems[0].used)
	}
}

func TestAllocateErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := newAlloc(t, "10.0.0.0/30") // .1 and .2; .3 is the broadcast address
	for i := 0; i < 2; i++ {
		s := svc()
		if err := a.PrepareCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AllocateCreate(ctx, s, false); err != nil {
			t.Fatal(err)
		}
	}
	s := svc()
	_ = a.PrepareCreate(context.Background(), s)
	_, err := a.AllocateCreate(ctx, s, false)
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed to allocate a serviceIP: range is full") {
		t.Errorf("full: %v", err)
	}
	s = svc(func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.1" })
	_ = a.PrepareCreate(context.Background(), s)
	_, err = a.AllocateCreate(ctx, s, false)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.clusterIPs: Invalid value: ["10.0.0.1"]: failed to allocate IP 10.0.0.1: provided IP is already allocated`) {
		t.Errorf("taken: %v", err)
	}
	s = svc(func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.3" })
	_ = a.PrepareCreate(context.Background(), s)
	_, err = a.AllocateCreate(ctx, s, false)
	// Upstream's answer (IPAddress model, testdata/parity clusterips/broadcast-v4).
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "failed to allocate IP 10.0.0.3: the provided network does not match the current range") {
		t.Errorf("broadcast address: %v", err)
	}
	s = svc(func(s *corev1.Service) { s.Spec.ClusterIP = "10.9.0.1" })
	_ = a.PrepareCreate(context.Background(), s)
	_, err = a.AllocateCreate(ctx, s, false)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "failed to allocate IP 10.9.0.1: the provided network does not match the current range") {
		t.Errorf("out of range: %v", err)
	}
}

func TestDryRunReservesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, mems := newAlloc(t, "10.0.0.0/24")
	for _, ip := range []string{"", "10.0.0.7"} {
		s := svc(func(s *corev1.Service) { s.Spec.ClusterIP = ip })
		if err := a.PrepareCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(ctx, s, true)
		if err != nil || s.Spec.ClusterIP == "" {
			t.Fatalf("dry-run: %v %v", s.Spec.ClusterIPs, err)
		}
		txn.Revert(ctx)
	}
	if len(mems[0].used) != 0 {
		t.Fatalf("dry-run reserved %v", mems[0].used)
	}
}

func TestAllocateUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, mems := newAlloc(t, "10.0.0.0/24", "fd00::/120")
	create := func(mutate ...func(*corev1.Service)) *corev1.Service {
		s := svc(mutate...)
		if err := a.PrepareCreate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(ctx, s, false)
		if err != nil {
			t.Fatal(err)
		}
		txn.Commit(ctx)
		return s
	}
	update := func(old *corev1.Service, mutate func(*corev1.Service)) (*corev1.Service, *Transaction, error) {
		s := old.DeepCopy()
		mutate(s)
		if err := a.PrepareUpdate(context.Background(), s, old); err != nil {
			return nil, nil, err
		}
		txn, err := a.AllocateUpdate(ctx, s, old, false)
		return s, txn, err
	}

	old := create()
	// single → dual allocates the secondary.
	up, txn, err := update(old, func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack) })
	if err != nil || len(up.Spec.ClusterIPs) != 2 || up.Spec.ClusterIPs[0] != old.Spec.ClusterIP {
		t.Fatalf("single→dual: %v %v", up, err)
	}
	txn.Commit(ctx)
	if len(mems[1].used) != 1 {
		t.Fatalf("secondary not reserved")
	}
	// dual → single releases it on Commit only.
	down, txn, err := update(up, func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack) })
	if err != nil || len(down.Spec.ClusterIPs) != 1 || len(down.Spec.IPFamilies) != 1 {
		t.Fatalf("dual→single: %v %v", down, err)
	}
	if len(mems[1].used) != 1 {
		t.Fatalf("secondary released before Commit")
	}
	txn.Commit(ctx)
	if len(mems[1].used) != 0 {
		t.Fatalf("secondary not released on Commit")
	}
	// The primary is immutable.
	_, _, err = update(down, func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.0.0.99", []string{"10.0.0.99"} })
	if err == nil || !strings.Contains(err.Error(), "may not change once set") {
		t.Fatalf("primary change: %v", err)
	}
	// type → ExternalName releases on Commit.
	ext, txn, err := update(down, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = "example.com"
	})
	if err != nil || ext.Spec.ClusterIP != "" || ext.Spec.IPFamilyPolicy != nil {
		t.Fatalf("to ExternalName: %+v %v", ext.Spec, err)
	}
	txn.Commit(ctx)
	if len(mems[0].used) != 0 {
		t.Fatalf("ExternalName kept %v", mems[0].used)
	}
	// Delete releases everything.
	d := create(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack) })
	a.Release(ctx, d)
	if len(mems[0].used)+len(mems[1].used) != 0 {
		t.Fatalf("Release left %v %v", mems[0].used, mems[1].used)
	}
}
