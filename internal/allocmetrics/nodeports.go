package allocmetrics

import (
	"context"
	"sync"

	"k8s.io/component-base/metrics"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
)

// Node-port metrics carry upstream's names (kube-apiserver's portallocator):
// kube_apiserver_nodeport_allocator_{allocated,available}_ports (gauges,
// computed at scrape time from the map, as for IPs) and
// kube_apiserver_nodeport_allocator_allocation{,_errors}_total{scope}.
const portSubsystem = "nodeport_allocator"

type portMetrics struct {
	total, errors *metrics.CounterVec
	usage         *portUsageCollector
}

func newPortMetrics() *portMetrics {
	return &portMetrics{
		total: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Subsystem: portSubsystem, Name: "allocation_total",
			Help:           "Number of NodePort allocations",
			StabilityLevel: metrics.ALPHA,
		}, []string{"scope"}),
		errors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Subsystem: portSubsystem, Name: "allocation_errors_total",
			Help:           "Number of errors trying to allocate NodePort",
			StabilityLevel: metrics.ALPHA,
		}, []string{"scope"}),
		usage: &portUsageCollector{
			allocated: metrics.NewDesc(metrics.BuildFQName(namespace, portSubsystem, "allocated_ports"),
				"Gauge measuring the number of allocated NodePorts for Services", nil, nil, metrics.ALPHA, ""),
			available: metrics.NewDesc(metrics.BuildFQName(namespace, portSubsystem, "available_ports"),
				"Gauge measuring the number of available NodePorts for Services", nil, nil, metrics.ALPHA, ""),
		},
	}
}

func (p *portMetrics) register(registry metrics.KubeRegistry) {
	registry.MustRegister(p.total, p.errors)
	registry.CustomMustRegister(p.usage)
}

// usager is implemented by the node-port map on etcd.
type usager interface {
	Usage(ctx context.Context) (allocation.Usage, error)
}

// WrapPorts returns a counting a, and makes the node-port gauges report it.
func (m *Metrics) WrapPorts(a nodeport.Interface) nodeport.Interface {
	if u, ok := a.(usager); ok {
		m.ports.usage.track(u)
	}
	return &instrumentedPorts{Interface: a, m: m.ports}
}

type instrumentedPorts struct {
	nodeport.Interface
	m *portMetrics
}

func (i *instrumentedPorts) Allocate(ctx context.Context, port int) error {
	err := i.Interface.Allocate(ctx, port)
	i.record("static", err)
	return err
}

func (i *instrumentedPorts) AllocateNext(ctx context.Context) (int, error) {
	port, err := i.Interface.AllocateNext(ctx)
	i.record("dynamic", err)
	return port, err
}

func (i *instrumentedPorts) record(scope string, err error) {
	if err != nil {
		i.m.errors.WithLabelValues(scope).Inc()
		return
	}
	i.m.total.WithLabelValues(scope).Inc()
}

type portUsageCollector struct {
	metrics.BaseStableCollector
	allocated, available *metrics.Desc

	mu   sync.Mutex
	maps []usager // guarded by mu
}

func (c *portUsageCollector) track(u usager) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maps = append(c.maps, u)
}

func (c *portUsageCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.allocated
	ch <- c.available
}

func (c *portUsageCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	maps := append([]usager(nil), c.maps...)
	c.mu.Unlock()
	for _, m := range maps {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		u, err := m.Usage(ctx)
		cancel()
		if err != nil {
			continue
		}
		ch <- metrics.NewLazyConstMetric(c.allocated, metrics.GaugeValue, float64(u.Used))
		ch <- metrics.NewLazyConstMetric(c.available, metrics.GaugeValue, float64(u.Free()))
	}
}
