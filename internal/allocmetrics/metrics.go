// Package allocmetrics instruments ClusterIP allocators with upstream
// kube-apiserver's metric names (design.md §9), so existing dashboards work
// unchanged, plus a per-band gauge of our own.
//
// Invariants and why:
//   - The allocated/available gauges are computed at scrape time from each
//     allocator's own counters, never maintained by counting objects on the
//     allocation path: upstream recounted every IPAddress per allocation
//     (78% of its CPU when filling a /18). Every served CIDR is reported from
//     the first scrape on, with 0 allocated, not only after an allocation.
//   - Counters and the duration histogram wrap each call; a dry run is not
//     counted (it allocates nothing).
package allocmetrics

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"k8s.io/component-base/metrics"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/subrange"
)

const (
	namespace = "kube_apiserver"
	subsystem = "clusterip_allocator"
	// scrapeTimeout bounds the usage read of one allocator during a scrape.
	scrapeTimeout = 2 * time.Second
)

// Metrics holds one server's allocator metrics. Register it once.
type Metrics struct {
	total    *metrics.CounterVec
	errors   *metrics.CounterVec
	duration *metrics.HistogramVec
	usage    *usageCollector
	ports    *portMetrics
}

// New returns unregistered metrics.
func New() *Metrics {
	return &Metrics{
		total: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "allocation_total",
			Help:           "Number of Cluster IPs allocations",
			StabilityLevel: metrics.ALPHA,
		}, []string{"cidr", "scope"}),
		errors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "allocation_errors_total",
			Help:           "Number of errors trying to allocate Cluster IPs",
			StabilityLevel: metrics.ALPHA,
		}, []string{"cidr", "scope"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "allocation_duration_seconds",
			Help:           "Duration in seconds to allocate a Cluster IP by ServiceCIDR",
			Buckets:        metrics.DefBuckets,
			StabilityLevel: metrics.ALPHA,
		}, []string{"cidr"}),
		usage: newUsageCollector(),
		ports: newPortMetrics(),
	}
}

// Register adds the metrics to registry.
func (m *Metrics) Register(registry metrics.KubeRegistry) {
	registry.MustRegister(m.total, m.errors, m.duration)
	registry.CustomMustRegister(m.usage)
	m.ports.register(registry)
}

// cidrNamer is implemented by allocators over several CIDRs (the IPAddress
// model) to name the CIDR of an address: the first served CIDR that holds
// it, else the first served; false when none is served.
type cidrNamer interface {
	CIDROf(ip netip.Addr) (netip.Prefix, bool)
}

// ranged is implemented by allocators over one range (the bitmap model).
type ranged interface {
	Range() subrange.Range
}

// collider is implemented by the IPAddress model: how many claims lost to an
// IPAddress created meanwhile (a stale cache, another replica).
type collider interface {
	Collisions() uint64
}

// casStats is implemented by the bitmap model on etcd.
type casStats interface {
	Stats() bitmap.EtcdStats
}

// byCIDR is implemented by allocators that report usage per CIDR.
type byCIDR interface {
	UsageByCIDR(ctx context.Context) (map[netip.Prefix]allocation.Usage, error)
}

// Wrap returns a counting a, and makes the usage gauges report it.
func (m *Metrics) Wrap(a allocation.Interface) allocation.Interface {
	m.usage.track(a)
	return &instrumented{Interface: a, m: m}
}

type instrumented struct {
	allocation.Interface
	m *Metrics
}

func (i *instrumented) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	start := time.Now()
	err := i.Interface.Allocate(ctx, ip, owner)
	i.record(ip, "static", start, err)
	return err
}

func (i *instrumented) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	start := time.Now()
	ip, err := i.Interface.AllocateNext(ctx, owner)
	i.record(ip, "dynamic", start, err)
	return ip, err
}

func (i *instrumented) record(ip netip.Addr, scope string, start time.Time, err error) {
	cidr := cidrOf(i.Interface, ip)
	if cidr == "" {
		// No range to attribute the call to: the allocator serves no CIDR
		// (yet). Counting it under cidr="" made every fresh install show
		// allocation_errors_total{cidr="",scope="static"} 1, from the
		// kubernetes Service created before the IPAddress model's informer
		// had seen the default ServiceCIDR; upstream refuses such a request
		// before any per-CIDR allocator (and its counters) is involved.
		return
	}
	if err != nil {
		i.m.errors.WithLabelValues(cidr, scope).Inc()
		return
	}
	i.m.total.WithLabelValues(cidr, scope).Inc()
	i.m.duration.WithLabelValues(cidr).Observe(time.Since(start).Seconds())
}

// cidrOf names the CIDR ip belongs to (the first in allocation order), or the
// allocator's first CIDR when ip is not in any (a failed allocation), or ""
// when the allocator serves no CIDR at all.
func cidrOf(a allocation.Interface, ip netip.Addr) string {
	switch a := a.(type) {
	case ranged:
		return a.Range().Prefix().String()
	case cidrNamer:
		if p, ok := a.CIDROf(ip); ok {
			return p.String()
		}
	}
	return ""
}

// usageCollector reports the allocated/available gauges at scrape time.
type usageCollector struct {
	metrics.BaseStableCollector

	allocated, available, bandAvailable             *metrics.Desc
	collisions, casConflicts, batches, batchedCalls *metrics.Desc

	mu         sync.Mutex
	allocators []allocation.Interface // guarded by mu
}

func newUsageCollector() *usageCollector {
	return &usageCollector{
		allocated: metrics.NewDesc(metrics.BuildFQName(namespace, subsystem, "allocated_ips"),
			"Gauge measuring the number of allocated IPs for Services", []string{"cidr"}, nil, metrics.ALPHA, ""),
		available: metrics.NewDesc(metrics.BuildFQName(namespace, subsystem, "available_ips"),
			"Gauge measuring the number of available IPs for Services", []string{"cidr"}, nil, metrics.ALPHA, ""),
		bandAvailable: metrics.NewDesc("allocator_clusterip_band_available_ips",
			"Available ClusterIPs per band: static (lower, for user-chosen IPs) and dynamic (upper)", []string{"cidr", "band"}, nil, metrics.ALPHA, ""),
		collisions: metrics.NewDesc("allocator_clusterip_allocation_collisions_total",
			"IPAddress claims that found the address taken (stale cache or another replica) and moved on to another candidate", []string{"family"}, nil, metrics.ALPHA, ""),
		casConflicts: metrics.NewDesc("allocator_clusterip_bitmap_cas_conflicts_total",
			"Bitmap writes that lost the compare-and-swap to another writer and were retried", []string{"cidr"}, nil, metrics.ALPHA, ""),
		batches: metrics.NewDesc("allocator_clusterip_bitmap_batches_total",
			"Group-commit batches committed on the bitmap (each is one etcd transaction)", []string{"cidr"}, nil, metrics.ALPHA, ""),
		batchedCalls: metrics.NewDesc("allocator_clusterip_bitmap_batched_calls_total",
			"Bitmap calls carried by group-commit batches; divided by batches_total it is the mean batch size", []string{"cidr"}, nil, metrics.ALPHA, ""),
	}
}

func (c *usageCollector) track(a allocation.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocators = append(c.allocators, a)
}

func (c *usageCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.allocated
	ch <- c.available
	ch <- c.bandAvailable
	ch <- c.collisions
	ch <- c.casConflicts
	ch <- c.batches
	ch <- c.batchedCalls
}

func (c *usageCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	allocators := append([]allocation.Interface(nil), c.allocators...)
	c.mu.Unlock()
	for _, a := range allocators {
		for cidr, u := range usageOf(a) {
			ch <- metrics.NewLazyConstMetric(c.allocated, metrics.GaugeValue, float64(u.Used), cidr)
			ch <- metrics.NewLazyConstMetric(c.available, metrics.GaugeValue, float64(u.Free()), cidr)
			ch <- metrics.NewLazyConstMetric(c.bandAvailable, metrics.GaugeValue, float64(u.StaticSize-u.StaticUsed), cidr, "static")
			ch <- metrics.NewLazyConstMetric(c.bandAvailable, metrics.GaugeValue, float64(u.DynamicSize()-u.DynamicUsed()), cidr, "dynamic")
		}
		switch a := a.(type) {
		case collider:
			family := "IPv4"
			if a.(allocation.Interface).IPv6() {
				family = "IPv6"
			}
			ch <- metrics.NewLazyConstMetric(c.collisions, metrics.CounterValue, float64(a.Collisions()), family)
		case casStats:
			cidr := cidrOf(a.(allocation.Interface), netip.Addr{})
			st := a.Stats()
			ch <- metrics.NewLazyConstMetric(c.casConflicts, metrics.CounterValue, float64(st.Conflicts), cidr)
			ch <- metrics.NewLazyConstMetric(c.batches, metrics.CounterValue, float64(st.Batches), cidr)
			ch <- metrics.NewLazyConstMetric(c.batchedCalls, metrics.CounterValue, float64(st.Requests), cidr)
		}
	}
}

// usageOf reads an allocator's usage per CIDR; an allocator that cannot
// answer now (not ready, etcd down) reports nothing this scrape.
func usageOf(a allocation.Interface) map[string]allocation.Usage {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	out := map[string]allocation.Usage{}
	switch r := a.(type) {
	case byCIDR:
		per, err := r.UsageByCIDR(ctx)
		if err != nil {
			return nil
		}
		for p, u := range per {
			out[p.String()] = u
		}
	case ranged:
		u, err := a.Usage(ctx)
		if err != nil {
			return nil
		}
		out[r.Range().Prefix().String()] = u
	}
	return out
}
