package servicealloc

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// held builds a stored Service with uid holding ip and node ports.
func held(uid, ip string, ports ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}}}
	if len(ports) > 0 {
		s.Spec.Type = corev1.ServiceTypeNodePort
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 80, NodePort: p})
		}
	}
	return s
}

// at returns svc at resourceVersion rv.
func at(svc *corev1.Service, rv string) *corev1.Service {
	svc.ResourceVersion = rv
	return svc
}

// TestSettleFailedWrite: a write refused by the API (4xx) is undone. One
// whose fate is unknown (an etcd or context error, a 5xx) is decided by its
// fence when there is one: kept when it was applied, whatever became of the
// Service since, undone when it was not. Without a fence, a read of the
// Service decides (settle.go's table): a create keeps its reservation if the
// Service was stored with its UID, and releases it if absent or another
// object only when the read is final (after a quota error); an update keeps
// its changes if the stored Service holds what it added, and undoes them if
// a final read finds the resourceVersion it replaced. Anything else
// (unreadable, a read not final, deleted or re-created, changed by another
// writer) is left to the repair.
func TestSettleFailedWrite(t *testing.T) {
	t.Parallel()
	svcs := schema.GroupResource{Resource: "services"}
	nospace := errors.New("etcdserver: mvcc: database space exceeded")
	notFound := apierrors.NewNotFound(svcs, "web")
	invalid := apierrors.NewInvalid(serviceKind, "web", field.ErrorList{field.Required(field.NewPath("spec"), "")})
	timeout := apierrors.NewTimeoutError("etcd", 1)
	unreachable := errors.New("etcd unavailable")

	create := attempt{uid: "u1", wrote: claimsOf(held("u1", "10.0.0.5"))}
	// An update of u1, read at resourceVersion 7, from ClusterIP 10.0.0.5
	// to NodePort 30001 (adds a port), and one back (adds nothing).
	update := attempt{uid: "u1", update: true, baseVersion: "7",
		base: claimsOf(held("u1", "10.0.0.5")), wrote: claimsOf(held("u1", "10.0.0.5", 30001))}
	drop := attempt{uid: "u1", update: true, baseVersion: "7",
		base: claimsOf(held("u1", "10.0.0.5", 30001)), wrote: claimsOf(held("u1", "10.0.0.5"))}
	landed := func(stored *corev1.Service) afterWrite {
		return afterWrite{fenced: true, landed: true, stored: stored, final: true}
	}
	notLanded := func(stored *corev1.Service) afterWrite {
		return afterWrite{fenced: true, stored: stored, final: true}
	}
	read := func(stored *corev1.Service, final bool, err error) afterWrite {
		return afterWrite{stored: stored, final: final, err: err}
	}
	tests := []struct {
		name  string
		a     attempt
		err   error
		after afterWrite
		want  settlement
	}{
		{"create invalid", create, invalid, read(held("u1", "10.0.0.5"), true, nil), release},
		{"create already exists", create, apierrors.NewAlreadyExists(svcs, "web"), read(held("u2", "10.0.0.9"), true, nil), release},
		{"create forbidden by admission", create, apierrors.NewForbidden(svcs, "web", errors.New("no")), read(nil, false, notFound), release},

		{"create timeout, fenced: landed, stored", create, timeout, landed(held("u1", "10.0.0.5")), keep},
		{"create deadline, fenced: landed, deleted by another request since", create, context.DeadlineExceeded, landed(nil), keep},
		{"create deadline, fenced: not landed, absent", create, context.DeadlineExceeded, notLanded(nil), release},
		{"create internal, fenced: not landed, another object by that name", create, apierrors.NewInternalError(timeout), notLanded(held("u2", "10.0.0.9")), release},
		{"create NOSPACE, fenced: landed", create, nospace, landed(held("u1", "10.0.0.5")), keep},

		{"create NOSPACE, read: stored", create, nospace, read(held("u1", "10.0.0.5"), true, nil), keep},
		{"create NOSPACE, read: absent", create, nospace, read(nil, true, nil), release},
		{"create timeout, read not final: stored", create, timeout, read(held("u1", "10.0.0.5"), false, nil), keep},
		{"create deadline, read not final: absent", create, context.DeadlineExceeded, read(nil, false, nil), leave},
		{"create deadline, read not final: not found", create, context.DeadlineExceeded, read(nil, false, notFound), leave},
		{"create internal, read not final: another object", create, apierrors.NewInternalError(timeout), read(held("u2", "10.0.0.9"), false, nil), leave},
		{"create canceled, unreadable", create, context.Canceled, read(nil, false, unreachable), leave},

		{"update conflict", update, apierrors.NewConflict(svcs, "web", errors.New("changed")), read(held("u1", "10.0.0.5"), true, nil), release},
		{"update timeout, fenced: landed, changed by another writer since", update, timeout, landed(at(held("u1", "10.0.0.5", 30002), "9")), keep},
		{"update timeout, fenced: landed, deleted since", update, timeout, landed(nil), keep},
		{"update timeout, fenced: not landed, at its base", update, timeout, notLanded(at(held("u1", "10.0.0.5"), "7")), release},
		{"update timeout, fenced: not landed, changed by another writer", update, timeout, notLanded(at(held("u1", "10.0.0.5", 30002), "9")), release},
		{"drop a port, fenced: landed", drop, timeout, landed(at(held("u1", "10.0.0.5"), "8")), keep},
		{"drop a port, fenced: not landed", drop, timeout, notLanded(at(held("u1", "10.0.0.5", 30001), "7")), release},

		{"update NOSPACE, read: stored", update, nospace, read(at(held("u1", "10.0.0.5", 30001), "8"), true, nil), keep},
		{"update timeout, read not final: stored", update, timeout, read(at(held("u1", "10.0.0.5", 30001), "8"), false, nil), keep},
		{"update NOSPACE, read: at its base", update, nospace, read(at(held("u1", "10.0.0.5"), "7"), true, nil), release},
		{"update timeout, read not final: at its base", update, timeout, read(at(held("u1", "10.0.0.5"), "7"), false, nil), leave},
		{"update NOSPACE, read: changed by another writer", update, nospace, read(at(held("u1", "10.0.0.5", 30002), "9"), true, nil), leave},
		{"update NOSPACE, read: deleted since", update, nospace, read(nil, true, notFound), leave},
		{"update NOSPACE, read: re-created since", update, nospace, read(at(held("u2", "10.0.0.5", 30001), "9"), true, nil), leave},
		{"update canceled, unreadable", update, context.Canceled, read(nil, false, unreachable), leave},
		{"drop a port, NOSPACE, read: at its base", drop, nospace, read(at(held("u1", "10.0.0.5", 30001), "7"), true, nil), release},
		{"drop a port, NOSPACE, read: stored or another writer's", drop, nospace, read(at(held("u1", "10.0.0.5"), "8"), true, nil), leave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := settleFailedWrite(tt.err, tt.a, tt.after); got != tt.want {
				t.Errorf("settleFailedWrite = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSettlementApply: keep and leave hold the reservation, release frees
// it; each settles the transaction once.
func TestSettlementApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		s    settlement
		held bool
	}{{keep, true}, {leave, true}, {release, false}} {
		a, mems := newAlloc(t, "10.0.0.0/24")
		s := svc()
		if err := a.PrepareCreate(ctx, s); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(ctx, s, false)
		if err != nil {
			t.Fatal(err)
		}
		tt.s.apply(ctx, txn, nil, errors.New("write failed"))
		txn.Revert(ctx) // settled already: no effect
		held, _ := mems[0].Has(ctx, netip.MustParseAddr(s.Spec.ClusterIP))
		if held != tt.held {
			t.Errorf("settlement %d: address held %v, want %v", tt.s, held, tt.held)
		}
	}
}

// TestSettleUpdateAttempts: an update's attempts that lost their
// compare-and-swap are undone; the last one, failed with an error that
// leaves its fate unknown, is kept when the Service read back holds what it
// wrote, and undone when it holds what it replaced. Each attempt here makes
// a single-stack Service dual-stack with another IPv6 address.
func TestSettleUpdateAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nospace := errors.New("etcdserver: mvcc: database space exceeded")
	for _, landed := range []bool{true, false} {
		a, mems := newAlloc(t, "10.0.0.0/24", "fd00::/120")
		old := svc(func(s *corev1.Service) {
			s.UID = "u1"
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.0.0.5", []string{"10.0.0.5"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		})
		if err := mems[0].Allocate(ctx, netip.MustParseAddr("10.0.0.5"), ownerOf(old)); err != nil {
			t.Fatal(err)
		}
		log := &writeLog{update: true}
		lctx := withWriteLog(ctx, log)
		var next []*corev1.Service
		for _, ip := range []string{"fd00::6", "fd00::7"} {
			s := old.DeepCopy()
			s.Spec.ClusterIPs = []string{"10.0.0.5", ip}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
			if err := a.PrepareUpdate(lctx, s, old); err != nil {
				t.Fatal(err)
			}
			txn, err := a.AllocateUpdate(lctx, s, old, false)
			if err != nil {
				t.Fatal(err)
			}
			finisher(lctx, txn, s, old)(lctx, true)
			next = append(next, s)
		}
		stored := old
		if landed {
			stored = next[len(next)-1]
		}
		log.settle(ctx, nospace, func(context.Context, error) afterWrite { return afterWrite{stored: stored, final: true} })
		want := map[string]bool{"10.0.0.5": true, "fd00::6": false, "fd00::7": landed}
		for ip, w := range want {
			m := mems[0]
			if netip.MustParseAddr(ip).Is6() {
				m = mems[1]
			}
			if got, _ := m.Has(ctx, netip.MustParseAddr(ip)); got != w {
				t.Errorf("update landed %v: %s held %v, want %v", landed, ip, got, w)
			}
		}
	}
}

// TestSettleLeftForLater: a create whose fence could not be closed yet
// (afterWrite.retry) is handed back unsettled, its address still held and
// its transaction open; settled later with what the fence then says (not
// landed), it releases. One whose read is final is settled at once.
func TestSettleLeftForLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, mems := newAlloc(t, "10.0.0.0/24")
	create := func() (*writeLog, netip.Addr) {
		t.Helper()
		s := svc(func(s *corev1.Service) { s.UID = "u1" })
		log := &writeLog{}
		lctx := withWriteLog(ctx, log)
		if err := a.PrepareCreate(lctx, s); err != nil {
			t.Fatal(err)
		}
		txn, err := a.AllocateCreate(lctx, s, false)
		if err != nil {
			t.Fatal(err)
		}
		finisher(lctx, txn, s, nil)(lctx, false)
		return log, netip.MustParseAddr(s.Spec.ClusterIP)
	}
	held := func(ip netip.Addr) bool {
		h, _ := mems[0].Has(ctx, ip)
		return h
	}
	timeout := apierrors.NewTimeoutError("etcd", 1)

	log, ip := create()
	left := log.settle(ctx, timeout, func(context.Context, error) afterWrite { return afterWrite{retry: true} })
	if left == nil || left.txn.done || !held(ip) {
		t.Fatalf("fence not closed yet: left %v, address held %v; want the attempt handed back, open, its address held", left, held(ip))
	}
	settleFailedWrite(timeout, *left, afterWrite{fenced: true, final: true}).apply(ctx, left.txn, nil, timeout)
	if held(ip) {
		t.Error("fenced later, not landed: the address is still held")
	}

	log, ip = create()
	if left := log.settle(ctx, timeout, func(context.Context, error) afterWrite { return afterWrite{final: true} }); left != nil || held(ip) {
		t.Errorf("the write can no longer land and the Service is absent: left %v, address held %v; want released at once", left, held(ip))
	}
}
