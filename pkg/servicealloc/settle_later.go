package servicealloc

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/allocation"
)

// settleInline bounds what a request spends learning its failed write's
// outcome before it answers; settleLater goes on after it.
const settleInline = 10 * time.Second

// settleLaterLimit bounds settleLater: by then the request's write lease
// has ended (allocation.WriteLease), unless etcd renewed it in a leader
// election; what is still unknown then is left to the repair, which waits
// for the lease itself.
const settleLaterLimit = 2 * allocation.WriteLease

// settle settles the reservations of a create or update after the store
// answered err. A write whose outcome is still unknown keeps what it
// reserved, and settleLater learns it in the background; the request's
// fence is Done once nothing needs it.
func (r *REST) settle(ctx context.Context, log *writeLog, err error, name string) {
	left := log.settle(ctx, err, r.readBack(name))
	if left == nil {
		r.fenceDone(ctx)
		return
	}
	go r.settleLater(context.WithoutCancel(ctx), left, err, name)
}

// settleLater settles a's reservations once its write's outcome is known:
// it closes the request's fence again and again (each read bounded by
// settleInline, each Close attempt by the fence's own bound, so a member
// that holds one is not asked forever), with pauses growing to 15 s. It
// stops when the outcome is known, when no write of the request can land
// any more (a read is then final), when the server drains, or after
// settleLaterLimit, leaving what is still unknown to the repair.
func (r *REST) settleLater(ctx context.Context, a *attempt, writeErr error, name string) {
	defer r.fenceDone(ctx)
	log := klog.FromContext(ctx).WithValues("service", a.txn.owner)
	log.Info("A Service write failed and its outcome is not known yet; holding what it reserved while its fence is closed in the background", "err", writeErr)
	read := r.readBack(name)
	limit := time.Now().Add(settleLaterLimit)
	for delay := time.Second; ; delay = min(2*delay, 15*time.Second) {
		time.Sleep(delay)
		rctx, cancel := context.WithTimeout(ctx, settleInline)
		after := read(rctx, writeErr)
		cancel()
		s := settleFailedWrite(writeErr, *a, after)
		if s != leave || !after.retry || r.alloc.draining() || time.Now().After(limit) {
			s.apply(ctx, a.txn, after.stored, writeErr)
			return
		}
	}
}
