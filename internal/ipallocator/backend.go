package ipallocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/dualwrite"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/subrange"
)

// waitForDualWriters bounds one carry-over's wait for the IPAddress-model
// replicas to acknowledge dual write; the server's bootstrap retries.
const waitForDualWriters = 30 * time.Second

// ErrUnknownModel is returned for a model name that is neither bitmap nor
// ipaddress ("auto" must be resolved first, by Detect).
var ErrUnknownModel = errors.New("unknown ClusterIP allocator model")

// Config is what a model needs from its host.
type Config struct {
	// Model is the model to run: model.Bitmap or model.IPAddress.
	Model model.Name
	// Prefixes are the service ranges of --service-cluster-ip-range, primary
	// family first. In the bitmap model the primary family's map is at
	// <EtcdPrefix>/ranges/serviceips, the other's at
	// <EtcdPrefix>/ranges/secondaryserviceips, whatever the prefixes' order.
	Prefixes []netip.Prefix
	// Etcd is the cluster's etcd. Nil builds in-memory bitmaps (bitmap model
	// only): not shared between replicas, lost on restart.
	Etcd *clientv3.Client
	// EtcdPrefix is --etcd-prefix (default etcdlayout.DefaultPrefix).
	EtcdPrefix string
	// Client has full rights on the API server that stores the Services: the
	// IPAddress model claims and releases addresses and watches through it,
	// a bitmap replica in a transition deletes IPAddresses through it, and
	// the repairs and the carry-over read and write through it. A protobuf
	// client costs least.
	Client kubernetes.Interface
	// Informers is a shared factory on Client for the IPAddress model's
	// informers; nil: each allocator makes its own.
	Informers informers.SharedInformerFactory
	// IPAddresses is where the allocators claim and release IPAddress
	// objects; nil: Client's. The server passes its own storage
	// (ipaddress.Objects), so an allocation costs no loopback request.
	IPAddresses ipaddress.Objects
	// Transition is the replica's membership in the model transition
	// (internal/transition); nil: the allocators neither dual-write nor wait for
	// dual writers, and there is no transition repair.
	Transition *transition.Coordinator
	// OnRefused is told of each ServiceCIDR the IPAddress model cannot serve
	// (an IPv6 prefix shorter than /64); nil: nobody is told.
	OnRefused func(ipaddress.RefusedCIDR)
}

// ReadsServices reports whether a Backend of cfg reads Services and
// Namespaces from Config.Informers (the IPAddress model's carry-over and
// repair; in a transition, either model's repair of the other), so the host
// registers those informers before it starts the factory.
func (cfg Config) ReadsServices() bool {
	return cfg.Model == model.IPAddress || cfg.Transition != nil
}

// Backend is one model as a server runs it. Build it with Open.
type Backend struct {
	cfg        Config
	layout     etcdlayout.Layout
	allocators []allocation.Interface
	// stores are the bitmaps the allocators write, primary first; nil
	// unless every family has one (a repair of part of the families would
	// take the primary map for the other family's).
	stores []iprepair.BitmapStore
	// detection is how a job's entry (OpenExisting) resolved the model.
	detection Detection
	// ranges are a job's --service-cluster-ip-range (Cluster.Ranges).
	ranges []string
}

// Open builds the allocator of each family of cfg.Model. The IPAddress
// model's informers start at once and stop when ctx ends; until they have
// synced its allocators answer allocation.ErrNotReady. A bitmap map that is
// missing is created empty, as kube-apiserver does at start-up (create-if-
// absent, so replicas starting together cannot clobber each other), and a
// stored map of another range of the same family is re-ranged.
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	if len(cfg.Prefixes) == 0 {
		return nil, errors.New("no service range")
	}
	if cfg.EtcdPrefix == "" {
		cfg.EtcdPrefix = etcdlayout.DefaultPrefix
	}
	if cfg.IPAddresses == nil && cfg.Client != nil {
		cfg.IPAddresses = cfg.Client.NetworkingV1().IPAddresses()
	}
	b := &Backend{cfg: cfg, layout: etcdlayout.Layout{Prefix: cfg.EtcdPrefix}}
	for i, prefix := range cfg.Prefixes {
		var (
			a     allocation.Interface
			store iprepair.BitmapStore
			err   error
		)
		switch cfg.Model {
		case model.Bitmap:
			a, store, err = b.openBitmap(ctx, prefix, i == 0)
		case model.IPAddress:
			a, store, err = b.openIPAddress(ctx, prefix, i == 0)
		default:
			return nil, fmt.Errorf("%w %q", ErrUnknownModel, cfg.Model)
		}
		if err != nil {
			return nil, fmt.Errorf("allocator for %s: %w", prefix, err)
		}
		b.allocators = append(b.allocators, a)
		if store != nil {
			b.stores = append(b.stores, store)
		}
	}
	if len(b.stores) != len(b.allocators) {
		b.stores = nil
	}
	return b, nil
}

// Model returns the model's name.
func (b *Backend) Model() model.Name { return b.cfg.Model }

// Allocators returns each family's allocator, primary first.
func (b *Backend) Allocators() []allocation.Interface {
	return append([]allocation.Interface(nil), b.allocators...)
}

// BitmapStores returns the bitmaps the allocators write, primary first: the
// bitmap model's own maps, or the IPAddress model's dual-written ones. Nil
// when they keep none (in-memory bitmaps, an IPAddress-model replica in no
// transition, a family too wide for a map).
func (b *Backend) BitmapStores() []iprepair.BitmapStore {
	return append([]iprepair.BitmapStore(nil), b.stores...)
}

// rangeKey is the bitmap model's key of a family.
func (b *Backend) rangeKey(primary bool) string {
	if primary {
		return b.layout.PrimaryServiceIPRange()
	}
	return b.layout.SecondaryServiceIPRange()
}

func (b *Backend) openBitmap(ctx context.Context, prefix netip.Prefix, primary bool) (allocation.Interface, iprepair.BitmapStore, error) {
	rng, err := subrange.New(prefix, model.Bitmap)
	if err != nil {
		return nil, nil, fmt.Errorf("service range %s: %w", prefix, err)
	}
	if b.cfg.Etcd == nil {
		a, err := clusterip.NewAllocator(rng)
		return a, nil, err
	}
	bits, err := clusterip.NewEtcdAllocator(b.cfg.Etcd, b.rangeKey(primary), rng, bitmap.EtcdOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("service range %s: %w", prefix, err)
	}
	if _, err := bits.Initialize(ctx); err != nil {
		return nil, nil, fmt.Errorf("service range %s: %w", prefix, err)
	}
	if b.cfg.Transition == nil {
		return bits, bits, nil
	}
	var services ipaddress.Services
	if b.cfg.Client != nil {
		services = ipaddress.ServicesOf(b.cfg.Client)
	}
	return dualwrite.NewBitmapReplica(bits, b.cfg.Transition, b.cfg.IPAddresses, services), bits, nil
}

func (b *Backend) openIPAddress(ctx context.Context, prefix netip.Prefix, primary bool) (allocation.Interface, iprepair.BitmapStore, error) {
	if b.cfg.Client == nil {
		return nil, nil, errors.New("the IPAddress model needs an API client")
	}
	ipa, err := ipaddress.New(ctx, ipaddress.Config{Client: b.cfg.Client, Informers: b.cfg.Informers, Objects: b.cfg.IPAddresses,
		IPv6: prefix.Addr().Is6(), OnRefused: b.cfg.OnRefused})
	if err != nil || b.cfg.Transition == nil || b.cfg.Etcd == nil {
		return ipa, nil, err
	}
	// Dual write (pkg/ipaddress/dualwrite) over the bitmap of the flag's
	// range, which a bitmap-model replica of this cluster would use.
	rng, err := subrange.New(prefix, model.Bitmap)
	if err != nil {
		klog.FromContext(ctx).Info("The service range cannot have a bitmap; its family is never dual-written", "range", prefix, "err", err)
		return ipa, nil, nil
	}
	bits, err := clusterip.NewEtcdAllocator(b.cfg.Etcd, b.rangeKey(primary), rng, bitmap.EtcdOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("dual-write bitmap for %s: %w", prefix, err)
	}
	if b.cfg.Transition.DualWrite() {
		if _, err := bits.Initialize(ctx); err != nil {
			return nil, nil, fmt.Errorf("dual-write bitmap for %s: %w", prefix, err)
		}
	}
	d, err := dualwrite.New(ipa, bits, b.cfg.Transition)
	if err != nil {
		return nil, nil, err
	}
	return d, bits, nil
}
