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
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestSettleFailedCreate: a create refused by the API (4xx) releases; one
// whose write's fate is unknown (an etcd or context error, a 5xx) keeps its
// reservation if the Service was stored with its UID, releases it if absent
// or another object, and leaves it to repair if the Service cannot be read.
func TestSettleFailedCreate(t *testing.T) {
	svcs := schema.GroupResource{Resource: "services"}
	nospace := errors.New("etcdserver: mvcc: database space exceeded")
	mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}}
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u2"}}
	notFound := apierrors.NewNotFound(svcs, "web")
	tests := []struct {
		name   string
		err    error
		stored *corev1.Service
		getErr error
		want   settlement
	}{
		{"invalid", apierrors.NewInvalid(serviceKind, "web", field.ErrorList{field.Required(field.NewPath("spec"), "")}), mine, nil, release},
		{"already exists", apierrors.NewAlreadyExists(svcs, "web"), other, nil, release},
		{"forbidden by admission", apierrors.NewForbidden(svcs, "web", errors.New("no")), nil, notFound, release},
		{"NOSPACE, stored anyway", nospace, mine, nil, keep},
		{"timeout, stored", apierrors.NewTimeoutError("etcd", 1), mine, nil, keep},
		{"deadline, not stored", context.DeadlineExceeded, nil, notFound, release},
		{"internal, another object by that name", apierrors.NewInternalError(nospace), other, nil, release},
		{"canceled, unreadable", context.Canceled, nil, errors.New("etcd unavailable"), leave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settleFailedCreate(tt.err, "u1", tt.stored, tt.getErr); got != tt.want {
				t.Errorf("settleFailedCreate = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSettlementApply: keep and leave hold the reservation, release frees
// it; each settles the transaction once.
func TestSettlementApply(t *testing.T) {
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
		tt.s.apply(ctx, txn, s, errors.New("write failed"))
		txn.Revert(ctx) // settled already: no effect
		held, _ := mems[0].Has(ctx, netip.MustParseAddr(s.Spec.ClusterIP))
		if held != tt.held {
			t.Errorf("settlement %d: address held %v, want %v", tt.s, held, tt.held)
		}
	}
}
