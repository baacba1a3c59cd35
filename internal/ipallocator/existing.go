package ipallocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/bitmap/clusterip"

	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/subrange"
)

var (
	// ErrNoEtcd is returned when the bitmap model is asked for and
	// Cluster.Etcd is nil: its maps are in etcd only.
	ErrNoEtcd = errors.New("the bitmap model needs etcd")
	// ErrNoMap is returned by OpenRepair in the bitmap model when no map is
	// stored and no range is given to build one on.
	ErrNoMap = errors.New("no bitmap map found")
)

// Cluster is a running cluster as the jobs beside its servers (repair,
// status, migrate, transition) reach it. It opens nothing until a job asks.
type Cluster struct {
	// Model is model.Bitmap, model.IPAddress or model.Auto (see Detect).
	Model model.Name
	// Etcd returns the cluster's etcd client, which the caller owns and
	// closes; nil when no etcd was given (model.Auto is then the IPAddress
	// model, read through the API).
	Etcd func(context.Context) (*clientv3.Client, error)
	// EtcdPrefix is --etcd-prefix.
	EtcdPrefix string
	// Ranges are the service ranges given (--service-cluster-ip-range),
	// primary family first; empty: the ranges the stored maps record.
	Ranges []string
	// Client reads and writes the cluster through its API server.
	Client kubernetes.Interface
}

// OpenExisting resolves c's model (model.Auto detected, through c.Client's
// API when c.Etcd is nil) and opens c's etcd when the model reads it: a
// Backend with neither allocators nor stores, whose Usage measures the
// cluster. The bitmap model detected without etcd gives a Backend without
// etcd: its Usage counts the Services' addresses, and OpenRepair refuses it
// with ErrNoEtcd. It writes nothing.
func OpenExisting(ctx context.Context, c Cluster) (*Backend, error) {
	m := c.Model
	var etcd *clientv3.Client
	if m == model.Bitmap || (m == model.Auto && c.Etcd != nil) {
		if c.Etcd == nil {
			return nil, ErrNoEtcd
		}
		var err error
		if etcd, err = c.Etcd(ctx); err != nil {
			return nil, err
		}
	}
	d, err := Detect(ctx, m, etcd, c.EtcdPrefix, c.Client)
	if err != nil {
		return nil, err
	}
	if d.Model != model.Bitmap && d.Model != model.IPAddress {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, d.Model)
	}
	return &Backend{cfg: Config{Model: d.Model, Etcd: etcd, EtcdPrefix: c.EtcdPrefix, Client: c.Client}, detection: d, ranges: c.Ranges}, nil
}

// Detection is how OpenExisting or OpenRepair resolved the Cluster's model
// (see Detect); the zero Detection for a Backend built by Open.
func (b *Backend) Detection() Detection { return b.detection }

// OpenRepair is a Backend over the maps c already has, for the standalone
// repair job: no allocators, the repairs only. In the bitmap model it reads
// the maps (BitmapStores) on the given ranges, else on the ranges they
// record; it creates none.
func OpenRepair(ctx context.Context, c Cluster) (*Backend, error) {
	b, err := OpenExisting(ctx, c)
	if err != nil || b.cfg.Model != model.Bitmap {
		return b, err
	}
	if b.cfg.Etcd == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoEtcd, b.detection)
	}
	if b.stores, err = ExistingBitmapStores(ctx, b.cfg.Etcd, c.EtcdPrefix, c.Ranges, nil); err != nil {
		return nil, err
	}
	if len(b.stores) == 0 {
		return nil, fmt.Errorf("%w under %s/ranges", ErrNoMap, c.EtcdPrefix)
	}
	return b, nil
}

// LeaksWaitForPasses reports whether the model's repair frees a leak only
// once three passes have seen it (the bitmap model, as upstream's); the
// IPAddress model's orphans have a grace in time instead.
func (b *Backend) LeaksWaitForPasses() bool { return b.cfg.Model == model.Bitmap }

// AllocatesFromServiceCIDRs reports whether the model hands out addresses
// from the ServiceCIDRs, whose lifecycle can drain one (the IPAddress
// model); the bitmap model serves --service-cluster-ip-range only.
func (b *Backend) AllocatesFromServiceCIDRs() bool { return b.cfg.Model == model.IPAddress }

// RepairsIPAddresses reports whether the model's repair judges IPAddress
// objects (the IPAddress model), so that its findings can be about one
// another controller manages.
func (b *Backend) RepairsIPAddresses() bool { return b.cfg.Model == model.IPAddress }

// Etcd returns the etcd client the Backend reads, or nil.
func (b *Backend) Etcd() *clientv3.Client { return b.cfg.Etcd }

// Usage measures how full the service ranges are under the Backend's
// model, from the bitmap model's maps in etcd or the IPAddress model's
// objects; without etcd, the bitmap model from the Services' addresses
// (servicesUsage). It writes nothing.
func (b *Backend) Usage(ctx context.Context) (*rangeusage.Usage, error) {
	switch b.cfg.Model {
	case model.Bitmap:
		if b.cfg.Etcd == nil {
			return b.servicesUsage(ctx)
		}
		return rangeusage.FromBitmap(ctx, b.cfg.Etcd, b.cfg.EtcdPrefix, b.cfg.Client)
	case model.IPAddress:
		return rangeusage.FromIPAddresses(ctx, b.cfg.Client)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownModel, b.cfg.Model)
}

// servicesUsage measures the bitmap model without its maps: the addresses
// the Services hold, on the ranges given (--service-cluster-ip-range), else
// on the default ServiceCIDR's, which allocator serve creates from its own
// flag. A bit no Service holds (a leak) is not seen.
func (b *Backend) servicesUsage(ctx context.Context) (*rangeusage.Usage, error) {
	texts, source := b.ranges, "--service-cluster-ip-range"
	if len(texts) == 0 {
		sc, err := ListDefaultServiceCIDR(ctx, b.cfg.Client)
		if err != nil {
			return nil, err
		}
		if sc == nil {
			return nil, fmt.Errorf("%w to read its maps, and no ServiceCIDR %q names its range (--service-cluster-ip-range counts the Services' addresses)",
				ErrNoEtcd, servicecidr.DefaultName)
		}
		texts, source = sc.Spec.CIDRs, "ServiceCIDR/"+sc.Name
	}
	var ranges []rangeusage.Range
	for _, text := range texts {
		p, err := subrange.ParsePrefix(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("service range: %w", err)
		}
		ranges = append(ranges, rangeusage.Range{Prefix: p, Source: source, Ready: true})
	}
	return rangeusage.FromServices(ctx, b.cfg.Client, model.Bitmap, ranges)
}

// Migrate carries c's allocations over to the model to (cfg.Client is
// c.Client's when nil): MigrateToIPAddress, or MigrateToBitmap on the maps
// of the given ranges, else of the ranges the stored maps record, else of
// the default ServiceCIDR "kubernetes".
func Migrate(ctx context.Context, to model.Name, c Cluster, cfg iprepair.MigrateConfig) (*iprepair.MigrationReport, error) {
	if cfg.Client == nil {
		cfg.Client = c.Client
	}
	switch to {
	case model.IPAddress:
		return iprepair.MigrateToIPAddress(ctx, cfg)
	case model.Bitmap:
		if c.Etcd == nil {
			return nil, ErrNoEtcd
		}
		etcd, err := c.Etcd(ctx)
		if err != nil {
			return nil, err
		}
		fallback, err := DefaultServiceCIDRs(ctx, cfg.Client)
		if err != nil {
			return nil, err
		}
		if cfg.Stores, err = ExistingBitmapStores(ctx, etcd, c.EtcdPrefix, c.Ranges, fallback); err != nil {
			return nil, err
		}
		return iprepair.MigrateToBitmap(ctx, cfg)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownModel, to)
}

// DefaultServiceCIDRs returns the CIDRs of the ServiceCIDR "kubernetes" (the
// one kube-apiserver creates from --service-cluster-ip-range), or none.
func DefaultServiceCIDRs(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	cidr, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get ServiceCIDR kubernetes: %w", err)
	}
	return cidr.Spec.CIDRs, nil
}

// ExistingBitmapStores returns one bitmap-model store per family, primary
// first, on ranges, else on the ranges the stored maps record, else on
// fallback. It returns no stores, and no error, when nothing says which
// ranges to use. It writes nothing.
func ExistingBitmapStores(ctx context.Context, etcd *clientv3.Client, prefix string, ranges, fallback []string) ([]iprepair.BitmapStore, error) {
	layout := etcdlayout.Layout{Prefix: prefix}
	keys := []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()}
	if len(ranges) == 0 {
		maps, err := clusterip.ReadStoredIPMaps(ctx, etcd, layout)
		if err != nil {
			return nil, err
		}
		for i, m := range maps {
			if m.Key != keys[i] {
				break // a secondary map without a primary one: as if none were stored
			}
			ranges = append(ranges, m.Range.Prefix().String())
		}
		if len(ranges) == 0 {
			ranges = fallback
		}
	}
	if len(ranges) > len(keys) {
		return nil, fmt.Errorf("at most two service ranges (one per family), got %v", ranges)
	}
	var stores []iprepair.BitmapStore
	for i, text := range ranges {
		p, err := subrange.ParsePrefix(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("service range: %w", err)
		}
		store, err := existingStore(etcd, keys[i], p)
		if err != nil {
			return nil, err
		}
		stores = append(stores, store)
	}
	if len(stores) == 2 && stores[0].Range().IPv6() == stores[1].Range().IPv6() {
		return nil, fmt.Errorf("the two service ranges must be of different families: %s, %s", stores[0].Range().Prefix(), stores[1].Range().Prefix())
	}
	return stores, nil
}

func existingStore(etcd *clientv3.Client, key string, prefix netip.Prefix) (iprepair.BitmapStore, error) {
	rng, err := subrange.New(prefix, model.Bitmap)
	if err != nil {
		return nil, fmt.Errorf("service range %s: %w", prefix, err)
	}
	store, err := clusterip.NewEtcdAllocator(etcd, key, rng, bitmap.EtcdOptions{})
	if err != nil {
		return nil, err
	}
	return store, nil
}
