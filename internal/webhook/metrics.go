package webhook

import (
	"net/http"

	"k8s.io/component-base/metrics"
)

const subsystem = "allocator_webhook"

// Outcomes of a pick (picks_total's outcome label).
const (
	// outcomeClaimed: kube-apiserver stored the IPAddress for the Service
	// the address was picked for.
	outcomeClaimed = "claimed"
	// outcomeTaken: kube-apiserver gave the address to another Service
	// (another replica's pick, or a user's choice) and refused this one's
	// create with "provided IP is already allocated": a conflict.
	outcomeTaken = "taken"
	// outcomeUnclaimed: no IPAddress for it within the hold: the create
	// failed later for another reason (or was a dry run's).
	outcomeUnclaimed = "unclaimed"
)

// pickCounts are the webhook's metrics.
type pickCounts struct {
	picks    *metrics.CounterVec
	requests *metrics.CounterVec
	registry metrics.KubeRegistry
}

func newPickCounts() *pickCounts {
	c := &pickCounts{
		picks: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem: subsystem, Name: "picks_total",
			Help: "ClusterIPs the webhook picked, by what became of them: claimed (kube-apiserver stored it for the Service), " +
				"taken (kube-apiserver refused it as already allocated: a conflict), unclaimed (no IPAddress within the hold)",
			StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem: subsystem, Name: "admission_requests_total",
			Help:           "Admission requests answered, by resource and result: patched, allowed, denied, error",
			StabilityLevel: metrics.ALPHA,
		}, []string{"resource", "result"}),
		registry: metrics.NewKubeRegistry(),
	}
	c.registry.MustRegister(c.picks, c.requests)
	return c
}

func (c *pickCounts) add(outcome string) { c.picks.WithLabelValues(outcome).Inc() }

func (c *pickCounts) answered(resource, result string) {
	c.requests.WithLabelValues(resource, result).Inc()
}

// handler serves the metrics in the Prometheus text format.
func (c *pickCounts) handler() http.Handler {
	return metrics.HandlerFor(c.registry, metrics.HandlerOpts{})
}
