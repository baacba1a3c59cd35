package repair

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/repair/report"
)

// DefaultInterval is how often a periodic repair runs, as upstream.
const DefaultInterval = 3 * time.Minute

// Options are the settings every repair shares: the ClusterIP repairs of
// both models (iprepair.BitmapConfig, iprepair.IPAddressConfig), the
// node-port repair (NodePortConfig) and the repair core (Config) embed them,
// and WithDefaults is the one place their defaults are applied. A setting a
// repair does not use is ignored.
type Options struct {
	// Client reads Services (and, in the IPAddress model, IPAddresses and
	// ServiceCIDRs, and writes IPAddresses).
	Client kubernetes.Interface
	// Services (bitmap and node-port maps) gives a pass the Services after
	// it has read its maps (StoredServices: read from etcd); nil: a paged
	// consistent list on Client (report.ListServices).
	Services ServiceSource
	// Stored (IPAddress model, RunOnce) reads a one-shot pass's objects
	// straight from the etcd they are stored in, all at one revision,
	// instead of listing them through Client's API server; nil: lists on
	// Client. Writes always go through Client.
	Stored StoredObjects
	// Handoff (IPAddress model, RunOnce with Stored) gives the pass the
	// Services a pass before it in the same run read from etcd
	// (StoredServices.Handoff); the pass reads its other objects at their
	// revision. nil, or nothing handed off: it reads the Services itself.
	Handoff *ServicesHandoff
	// Recorder receives the events; nil emits none.
	Recorder record.EventRecorder
	// Metrics counts problems; nil counts nothing.
	Metrics *report.Metrics
	// Interval is the period of Run's full passes (default DefaultInterval).
	Interval time.Duration
	// DryRun reports what a pass would change and changes nothing (no write,
	// no event, no metric, no leak counting).
	DryRun bool
	// LeakGrace (bitmap and node-port maps) is the least time between the
	// first pass that sees a key leaked and the pass that frees it (default
	// DefaultLeakGrace), on top of the LeakPasses rule: passes run back to
	// back (a rerun, a one-shot job run three times) must not free the key
	// of a Service whose create is merely slow.
	LeakGrace time.Duration
	// OrphanGrace (IPAddress model) is how old an IPAddress must be before
	// the repair deletes or re-creates it (default DefaultOrphanGrace).
	OrphanGrace time.Duration
	// InFlight lists the writes of the API servers that may still be
	// applied (the servers' write leases in etcd). A reservation whose
	// grace is over is freed only once every write that was in flight then
	// has ended: one of them may still store the Service that holds it.
	// nil: no write outlives its request (kube-apiserver's), and the graces
	// alone decide.
	InFlight InFlight
	// Now is the clock the graces are measured with (default time.Now).
	Now func() time.Time
}

// ServiceSource gives a pass over a stored map every Service, oldest first
// (report.OldestFirst). A pass reads its maps before it calls Services, and
// needs every Service write committed before that read (package doc), so
// Services must reflect every write committed before it was called, as a
// consistent list does. The Services may be shared (an informer's cache): a
// pass only reads them.
type ServiceSource interface {
	Services(ctx context.Context) ([]*corev1.Service, error)
}

// ListServices returns the Services of a pass: o.Services', or without it
// those of a paged consistent list on o.Client.
func (o Options) ListServices(ctx context.Context) ([]*corev1.Service, error) {
	if o.Services != nil {
		return o.Services.Services(ctx)
	}
	return report.ListServices(ctx, o.Client)
}

// WithDefaults returns o with every unset (zero or negative) duration and
// clock given its default. It is idempotent, so a constructor applies it
// whether or not its caller did.
func (o Options) WithDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.LeakGrace <= 0 {
		o.LeakGrace = DefaultLeakGrace
	}
	if o.OrphanGrace <= 0 {
		o.OrphanGrace = DefaultOrphanGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
