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

	"github.com/allocator/allocator/internal/holding"
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
// A write that failed did not always fail to land. A write refused by the
// API (a 4xx: invalid, conflict, already exists) was not stored. Any other
// error leaves the outcome open: etcd answers "database space exceeded"
// for writes it applied past its quota, and a write whose caller gave up
// (a timeout, a slow member, a broken connection) may be applied after the
// answer, even after a read sent to another member found nothing. Releasing
// then frees what a stored Service holds, and the next create takes it: a
// duplicate. So the outcome is made known first, through the request's
// fence (Fencer, internal/fence): after it is closed no write of the request can
// be applied, and it tells whether the write was, whatever happened to the
// Service since. Without a Fencer (a server that embeds this package on
// other storage), or when the fence cannot be closed, a read of the Service
// decides, and it releases only on a read that is final: after a quota
// error, which etcd answers once it has applied or refused the write.
//
//	request  known after the failure                               settlement
//	either   refused by the API (4xx)                              release (Revert)
//	either   fenced: the write was applied                         keep (Commit)
//	either   fenced: the write was not applied                     release (Revert)
//	without a fence, the Service read back decides:
//	create   stored with the create's UID                          keep
//	create   absent or another object, on a final read             release
//	update   same UID, holds every claim the update added          keep: only this update can hold them
//	update   same UID, at the resourceVersion it read, final read  release: nothing was written since
//	either   anything else (unreadable, not final, deleted,        leave: release nothing
//	         re-created, changed by another writer)
//
// A read is final after a quota error, and once the request's fence says no
// write of it can be applied any more (its lease ended: ErrWritesEnded).
// When the fence could not be closed in time (a slow member, a stalled
// connection) the request returns, holding what it reserved, and the
// server goes on closing the fence in the background (REST.settleLater),
// attempt after attempt, each bounded so that the next reaches another
// endpoint, until the outcome is known or the lease has ended; it settles
// then. A settlement never releases what the Service read holds. What is
// left is a leak, which the repair's leak rule frees once no write that
// was in flight can land (repair.Options.InFlight); a duplicate is never
// repaired.

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
	// baseVersion is the resourceVersion of the object it replaced
	// (updates): the store's compare-and-swap compares it.
	baseVersion string
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
				a.uid, a.update, a.base, a.baseVersion = old.UID, true, claimsOf(old), old.ResourceVersion
			}
			log.mu.Lock()
			log.attempts = append(log.attempts, a)
			log.mu.Unlock()
		}
	}
}

// afterWrite is what is known of a write that failed with an error that
// leaves its outcome open.
type afterWrite struct {
	// fenced says landed is known: the request's fence was closed.
	fenced, landed bool
	// stored is the Service read after the write (nil when absent), final
	// when no write of the request can be applied after the read, or err
	// the read's error.
	stored *corev1.Service
	final  bool
	err    error
	// retry says the fence could not be closed yet and the request's
	// writes may still land: a later Close may learn the outcome.
	retry bool
}

// readBack learns what it can of a write that failed with err.
type readBack func(ctx context.Context, err error) afterWrite

// settle settles the recorded attempts after the store answered err. Every
// attempt but the last lost its compare-and-swap and is reverted; the last
// is committed on success, and otherwise decided by settleFailedWrite on
// what read finds. When that leaves it unknown but a later read may learn
// it (afterWrite.retry), settle returns it unsettled, holding what it
// reserved, for the caller to settle later (REST.settleLater).
func (l *writeLog) settle(ctx context.Context, err error, read readBack) *attempt {
	l.mu.Lock()
	attempts := l.attempts
	l.attempts = nil
	l.mu.Unlock()
	if len(attempts) == 0 {
		return nil
	}
	last := attempts[len(attempts)-1]
	for _, a := range attempts[:len(attempts)-1] {
		a.txn.Revert(ctx)
	}
	if err == nil {
		last.txn.Commit(ctx)
		return nil
	}
	var after afterWrite
	if !writeRefused(err) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleInline)
		after = read(rctx, err)
		cancel()
	}
	s := settleFailedWrite(err, last, after)
	if s == leave && after.retry {
		return &last
	}
	s.apply(ctx, last.txn, after.stored, err)
	return nil
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
// err, given what is known after it (the table above).
func settleFailedWrite(err error, a attempt, after afterWrite) settlement {
	switch {
	case writeRefused(err):
		return release
	case after.fenced && after.landed:
		return keep
	case after.fenced:
		return release
	case after.err != nil && !apierrors.IsNotFound(after.err):
		return leave
	}
	stored := after.stored
	if after.err != nil {
		stored = nil
	}
	sameUID := stored != nil && a.uid != "" && stored.UID == a.uid
	if !a.update {
		switch {
		case sameUID:
			return keep
		case after.final:
			return release
		}
		return leave
	}
	if !sameUID {
		return leave
	}
	if added := a.wrote.minus(a.base); !added.empty() && claimsOf(stored).holds(added) {
		return keep
	}
	if after.final && stored.ResourceVersion == a.baseVersion {
		return release
	}
	return leave
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
	c := claims{ips: holding.IPs(svc), ports: holding.NodePorts(svc)}
	slices.SortFunc(c.ips, netip.Addr.Compare)
	return c
}

// minus returns what c holds and o does not.
func (c claims) minus(o claims) claims {
	return claims{
		ips:   slices.DeleteFunc(slices.Clone(c.ips), func(ip netip.Addr) bool { return slices.Contains(o.ips, ip) }),
		ports: slices.DeleteFunc(slices.Clone(c.ports), func(p int) bool { return slices.Contains(o.ports, p) }),
	}
}

func (c claims) empty() bool { return len(c.ips) == 0 && len(c.ports) == 0 }

// holds reports whether c holds everything o does.
func (c claims) holds(o claims) bool { return o.minus(c).empty() }

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
