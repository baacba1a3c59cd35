package report

import (
	"k8s.io/component-base/metrics"
)

// Metrics are the repair controllers' metrics with upstream's names, so
// existing dashboards work (design.md §9). Create them with NewMetrics and
// register them with Register; a nil *Metrics records nothing.
type Metrics struct {
	ipErrors        *metrics.CounterVec
	reconcileErrors *metrics.Counter
	// Node-port repair, upstream's apiserver_nodeport_repair_* names.
	portErrors          *metrics.CounterVec
	portReconcileErrors *metrics.Counter
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		ipErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      "apiserver",
			Subsystem:      "clusterip_repair",
			Name:           "ip_errors_total",
			Help:           "Number of errors detected on clusterips by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown, invalid",
			StabilityLevel: metrics.ALPHA,
		}, []string{"type"}),
		reconcileErrors: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      "apiserver",
			Subsystem:      "clusterip_repair",
			Name:           "reconcile_errors_total",
			Help:           "Number of reconciliation failures on the clusterip repair reconcile loop",
			StabilityLevel: metrics.ALPHA,
		}),
		portErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      "apiserver",
			Subsystem:      "nodeport_repair",
			Name:           "port_errors_total",
			Help:           "Number of errors detected on ports by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown",
			StabilityLevel: metrics.ALPHA,
		}, []string{"type"}),
		portReconcileErrors: metrics.NewCounter(&metrics.CounterOpts{
			Namespace:      "apiserver",
			Subsystem:      "nodeport_repair",
			Name:           "reconcile_errors_total",
			Help:           "Number of reconciliation failures on the nodeport repair reconcile loop",
			StabilityLevel: metrics.ALPHA,
		}),
	}
}

// Register adds the metrics to registry.
func (m *Metrics) Register(registry metrics.KubeRegistry) {
	registry.MustRegister(m.ipErrors, m.reconcileErrors, m.portErrors, m.portReconcileErrors)
}

// ObserveProblem counts a finding; a leak counts once, when it is freed, as upstream.
func (m *Metrics) ObserveProblem(p Problem) {
	if m != nil && (p.Type != TypeLeak || p.Fixed) {
		m.ipErrors.WithLabelValues(p.Type).Inc()
	}
}

// ReconcileError counts a failed ClusterIP repair pass.
func (m *Metrics) ReconcileError() {
	if m != nil {
		m.reconcileErrors.Inc()
	}
}

// ObservePortProblem is ObserveProblem for a node-port finding.
func (m *Metrics) ObservePortProblem(p Problem) {
	if m != nil && (p.Type != TypeLeak || p.Fixed) {
		m.portErrors.WithLabelValues(p.Type).Inc()
	}
}

// PortReconcileError counts a failed node-port repair pass.
func (m *Metrics) PortReconcileError() {
	if m != nil {
		m.portReconcileErrors.Inc()
	}
}
