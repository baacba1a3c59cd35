package nodeport

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/bitmap"
)

// rerange carries a stored map of another node-port range (a changed
// --service-node-port-range) over to the configured one: ports in both
// ranges stay allocated; ports outside the new range are dropped and logged
// (the repair loop reports the Services holding them, PortOutOfRange, as
// upstream does). Why keep instead of starting empty: a port a Service holds
// must never be handed out again just because the range grew.
func (a *EtcdAllocator) rerange(ctx context.Context) ([]int, error) {
	var from Range
	droppedSlots, err := a.RerangeSlots(ctx, func(stored string) (bitmap.SlotMap, error) {
		r, err := Parse(stored)
		if err != nil {
			return bitmap.SlotMap{}, err
		}
		from = r
		return bitmap.SlotMap{Slots: r.Size(), To: func(i int) (int, bool) {
			return a.rng.Index(r.Base() + i)
		}}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node-port map: %w", err)
	}
	dropped := make([]int, 0, len(droppedSlots))
	for _, i := range droppedSlots {
		dropped = append(dropped, from.Base()+i)
	}
	if !from.IsZero() {
		klog.FromContext(ctx).Info("Re-ranged the node-port map", "key", a.Key(), "from", from, "to", a.rng, "dropped", dropped)
	}
	return dropped, nil
}
