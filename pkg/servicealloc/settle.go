package servicealloc

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/klog/v2"
)

// Settling what a create or update reserved, once the store has answered.
//
// The store calls the finish hook of a plain create after its write, with
// its outcome. It calls the hook of an update (or of a create through update
// or server-side apply) inside its compare-and-swap loop, before the write:
// a passed attempt is provisional, an attempt that lost the compare was
// never written, and only the last one can have been. So the hook records
// the transactions in the request's writeLog, and REST.Create and
// REST.Update settle them knowing the store's answer.
//
// A write that failed did not always fail to land. It can reach etcd and
// still return an error: a timeout after the request was sent, or etcd's
// "database space exceeded" for the write that crossed the quota. Undoing
// the reservation then frees addresses and node ports a stored Service
// holds, and the next create can take them: a duplicate. An update that did
// not land must not release what it dropped either: the stored Service
// still holds it. So when the error does not say the write was refused, the
// Service is read back, and:
//   - a create stored with its UID keeps its reservation (Commit); absent,
//     or another object by that name, it is released (Revert);
//   - an update keeps its changes (Commit) when the stored Service, same
//     UID, holds what the attempt wrote, and undoes them (Revert) when it
//     holds what the attempt replaced;
//   - anything else (unreadable, gone, re-created, changed by another
//     writer meanwhile) is left as it is: nothing released, and the
//     repair's leak rule frees what no Service holds. A leak is repaired, a
//     duplicate is not.
// Whatever is settled, nothing the stored Service holds is released.

// writeLog collects the transactions of one create or update request.
type writeLog struct {
	update bool // the request is an update: passed attempts are provisional

	mu       sync.Mutex
	attempts []attempt // guarded by mu
}

// attempt is one recorded attempt of the request.
type attempt struct {
	txn    *Transaction
	uid    types.UID // the Service's UID
	update bool      // an update of a stored Service, not a create
	// wrote is what the attempt's object holds; base what the object it
	// replaced held (updates).
	wrote, base claims
}

type writeLogKey struct{}

func withWriteLog(ctx context.Context, l *writeLog) context.Context {
	return context.WithValue(ctx, writeLogKey{}, l)
}

func writeLogFrom(ctx context.Context) *writeLog {
	l, _ := ctx.Value(writeLogKey{}).(*writeLog)
	return l
}

// finisher returns the FinishFunc of txn, reserved for svc (replacing old,
// nil for a create).
func finisher(ctx context.Context, txn *Transaction, svc, old *corev1.Service) genericregistry.FinishFunc {
	log := writeLogFrom(ctx)
	return func(ctx context.Context, success bool) {
		switch {
		case log == nil && success, log != nil && !log.update && success:
			txn.Commit(ctx) // written
		case log == nil, log.update && !success:
			txn.Revert(ctx) // never written
		default:
			// A plain create that failed, or an update's passed attempt.
			a := attempt{txn: txn, uid: svc.UID, wrote: claimsOf(svc)}
			if old != nil {
				a.uid, a.update, a.base = old.UID, true, claimsOf(old)
			}
			log.mu.Lock()
			log.attempts = append(log.attempts, a)
			log.mu.Unlock()
		}
	}
}

// settle settles the recorded attempts after the store answered err. Every
// attempt but the last lost its compare-and-swap and is reverted; the last
// is committed on success, and otherwise decided by settleFailedWrite,
// reading the Service back with read when the error leaves the write's fate
// unknown.
func (l *writeLog) settle(ctx context.Context, err error, read func(context.Context) (*corev1.Service, error)) {
	l.mu.Lock()
	attempts := l.attempts
	l.attempts = nil
	l.mu.Unlock()
	if len(attempts) == 0 {
		return
	}
	last := attempts[len(attempts)-1]
	for _, a := range attempts[:len(attempts)-1] {
		a.txn.Revert(ctx)
	}
	if err == nil {
		last.txn.Commit(ctx)
		return
	}
	var stored *corev1.Service
	getErr := err
	if !writeRefused(err) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		stored, getErr = read(rctx)
		cancel()
	}
	settleFailedWrite(err, last, stored, getErr).apply(ctx, last.txn, stored, err)
}

// settlement is what becomes of a failed write's reservation.
type settlement int

const (
	release settlement = iota // not written: Revert
	keep                      // written: Commit
	leave                     // unknown: release nothing, the repair decides
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

// settleFailedWrite decides the last attempt a of a write that failed with
// err, given a read of the Service after it: stored, with getErr nil, or
// the read's error.
func settleFailedWrite(err error, a attempt, stored *corev1.Service, getErr error) settlement {
	switch {
	case writeRefused(err):
		return release
	case getErr == nil && stored != nil && a.uid != "" && stored.UID == a.uid:
		held := claimsOf(stored)
		switch {
		case !a.update || held.equal(a.wrote):
			return keep
		case held.equal(a.base):
			return release
		}
		return leave // another writer changed it since
	case !a.update && (getErr == nil || apierrors.IsNotFound(getErr)):
		return release // absent, or another object by that name
	default:
		return leave
	}
}

// apply settles txn as s says, never releasing what stored holds.
func (s settlement) apply(ctx context.Context, txn *Transaction, stored *corev1.Service, err error) {
	log := klog.FromContext(ctx)
	if stored != nil {
		txn.spare(claimsOf(stored))
	}
	switch s {
	case keep:
		log.Info("A Service write failed after it was stored; keeping what it reserved", "service", txn.owner, "err", err)
		txn.Commit(ctx)
	case leave:
		log.Info("A Service write failed and whether it was stored is unknown; leaving its addresses and node ports to the repair", "service", txn.owner, "err", err)
		txn.done = true
	default:
		txn.Revert(ctx)
	}
}

// claims are the cluster IPs and node ports a Service holds, sorted.
type claims struct {
	ips   []netip.Addr
	ports []int
}

func claimsOf(svc *corev1.Service) claims {
	c := claims{ips: allocatedIPs(svc), ports: NodePortsOf(svc)}
	slices.SortFunc(c.ips, netip.Addr.Compare)
	return c
}

func (c claims) equal(o claims) bool {
	return slices.Equal(c.ips, o.ips) && slices.Equal(c.ports, o.ports)
}

// spare removes from the transaction's releases what held holds.
func (t *Transaction) spare(held claims) {
	notHeldIP := func(ips []netip.Addr) []netip.Addr {
		return slices.DeleteFunc(ips, func(ip netip.Addr) bool { return slices.Contains(held.ips, ip) })
	}
	notHeldPort := func(ports []int) []int {
		return slices.DeleteFunc(ports, func(p int) bool { return slices.Contains(held.ports, p) })
	}
	t.reserved, t.toRelease = notHeldIP(t.reserved), notHeldIP(t.toRelease)
	t.ports.reserved, t.ports.toRelease = notHeldPort(t.ports.reserved), notHeldPort(t.ports.toRelease)
}
