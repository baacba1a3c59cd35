package iprepair

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// inFlightRecheck is how soon Run looks again at an orphan kept only for
// the writes in flight.
const inFlightRecheck = 5 * time.Second

// orphanAge is how long an entry of orphanWait is kept: far past any write
// lease, so an entry left behind by an IPAddress that was held or deleted
// meanwhile is dropped, and one still orphaned is observed again.
const orphanAge = time.Hour

// orphanWait keeps, per IPAddress, the moment its grace was first seen over:
// it is deleted only once every write in flight then has ended, for one of
// them may still store the Service that holds it (repair.Options.InFlight).
type orphanWait struct {
	inFlight *repair.Horizon

	mu   sync.Mutex
	over map[types.UID]time.Time // guarded by mu
}

func newOrphanWait(h *repair.Horizon) *orphanWait {
	return &orphanWait{inFlight: h, over: map[types.UID]time.Time{}}
}

// ended reports whether the writes in flight when ipa's grace was first
// seen over have all ended.
func (w *orphanWait) ended(ctx context.Context, ipa *networkingv1.IPAddress) (bool, error) {
	now, err := w.inFlight.Observe(ctx)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	over, ok := w.over[ipa.UID]
	if !ok {
		over = now
		w.over[ipa.UID] = now
	}
	for uid, t := range w.over {
		if now.Sub(t) > orphanAge {
			delete(w.over, uid)
		}
	}
	w.mu.Unlock()
	if !w.inFlight.Ended(over) {
		return false, nil
	}
	w.forget(ipa.UID)
	return true, nil
}

func (w *orphanWait) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.over, uid)
}

// waitInFlight reports an orphan past its grace that is kept because a
// write in flight when the grace ended may still store its Service, and
// asks for a look again soon.
func (r *IPAddressRepair) waitInFlight(ctx context.Context, ip netip.Addr, ipa *networkingv1.IPAddress, out *outcome) (bool, error) {
	ended, err := r.orphans.ended(ctx, ipa)
	if err != nil || ended {
		return false, err
	}
	out.note(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(), Service: ipaddress.Parent(ipa), InFlight: true,
		Message: fmt.Sprintf("IPAddress %s (parent %s) is held by no Service; it is deleted once the Service writes in flight, "+
			"which may still store its Service, can no longer land", ip, ipaddress.Parent(ipa))})
	out.retryAfter = inFlightRecheck
	return true, nil
}
