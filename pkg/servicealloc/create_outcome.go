package servicealloc

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// A create whose storage write failed must not always release what it
// reserved. A write can reach etcd and still return an error: a timeout
// after the request was sent, or etcd's "database space exceeded" for the
// write that crossed the quota. Releasing then frees addresses and node
// ports a stored Service holds, and the next create can take them: a
// duplicate. So a create that failed with an error that does not say the
// write was refused reads the Service back before it settles: stored with
// this create's UID, the reservation is the Service's and is kept (Commit);
// absent, or another object, it is released (Revert); unreadable, it is
// kept and the repair's leak rule frees it if no Service holds it (a leak
// is repaired, a duplicate is not).

// createOutcome carries a plain create's transaction out of the store's
// finish hook when the create failed, so REST.Create settles it knowing the
// error (the hook only learns success or failure).
type createOutcome struct {
	failed *Transaction
}

type createOutcomeKey struct{}

func withCreateOutcome(ctx context.Context, o *createOutcome) context.Context {
	return context.WithValue(ctx, createOutcomeKey{}, o)
}

func createOutcomeFrom(ctx context.Context) *createOutcome {
	o, _ := ctx.Value(createOutcomeKey{}).(*createOutcome)
	return o
}

// settlement is what becomes of a failed create's reservation.
type settlement int

const (
	release settlement = iota // the Service was not stored
	keep                      // it was stored: the reservation is its
	leave                     // unknown: keep it, and let repair decide
)

// writeRefused reports whether err says the Service was not stored: an API
// status below 500 (invalid, forbidden, already exists, conflict...). Other
// errors (a 5xx, an etcd or transport error, a context that ended) leave
// the write's fate unknown.
func writeRefused(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code > 0 && code < 500
	}
	return false
}

// settleFailedCreate decides a failed create from its error and, when the
// error leaves the write's fate unknown, from a read of the Service after
// it: stored (with uid), getErr nil, or the read's error.
func settleFailedCreate(err error, uid types.UID, stored *corev1.Service, getErr error) settlement {
	switch {
	case writeRefused(err):
		return release
	case getErr == nil && stored != nil && uid != "" && stored.UID == uid:
		return keep
	case getErr == nil, apierrors.IsNotFound(getErr):
		return release // absent, or another object by that name
	default:
		return leave
	}
}

// settle applies s to txn.
func (s settlement) apply(ctx context.Context, txn *Transaction, svc *corev1.Service, err error) {
	log := klog.FromContext(ctx)
	switch s {
	case keep:
		log.Info("A create failed after its Service was stored; keeping its addresses and node ports", "service", klog.KObj(svc), "err", err)
		txn.Commit(ctx)
	case leave:
		log.Info("A create failed and its Service could not be read back; leaving its addresses and node ports to the repair", "service", klog.KObj(svc), "err", err)
		txn.done = true
	default:
		txn.Revert(ctx)
	}
}
