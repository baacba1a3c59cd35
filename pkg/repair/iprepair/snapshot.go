package iprepair

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/repair/report"
)

// Snapshot is where MigrateToIPAddress reads the Services and IPAddresses
// it starts from. The objects are shared: nobody modifies them.
type Snapshot interface {
	// Services returns every Service, in any order.
	Services(ctx context.Context) ([]*corev1.Service, error)
	// IPAddresses returns a lookup of every IPAddress by name (nil: none of
	// that name), valid until the next call.
	IPAddresses(ctx context.Context) (func(name string) *networkingv1.IPAddress, error)
}

// apiSnapshot lists through the API, in pages: what a job outside the
// server reads.
type apiSnapshot struct{ client kubernetes.Interface }

func (s apiSnapshot) Services(ctx context.Context) ([]*corev1.Service, error) {
	return report.ListServices(ctx, s.client)
}

func (s apiSnapshot) IPAddresses(ctx context.Context) (func(string) *networkingv1.IPAddress, error) {
	byName, err := listIPAddressObjects(ctx, s.client)
	if err != nil {
		return nil, err
	}
	return func(name string) *networkingv1.IPAddress { return byName[name] }, nil
}

// InformerSnapshot reads the caches of factory's Service and IPAddress
// informers, waiting until both have synced. The factory must have them
// registered and started (the server's shared informers do).
//
// A server's start-up carry-over reads it: the caches hold the same
// objects, and listing them through the API would encode and decode
// 200,000 objects at every start at 100,000 Services, about a third of the
// start-up's CPU (hack/scale.sh). A cache may trail etcd by a moment;
// that is safe for a migration to the IPAddress model, which only
// creates, each create-if-absent: a Service it misses was created after
// it looked, as it could be after a list, and the repair carries it over.
// It is not for MigrateToBitmap, whose merge relies on lists newer than
// its read of the maps.
func InformerSnapshot(factory informers.SharedInformerFactory) Snapshot {
	return informerSnapshot{
		services: factory.Core().V1().Services().Informer(),
		ips:      factory.Networking().V1().IPAddresses().Informer(),
	}
}

type informerSnapshot struct{ services, ips cache.SharedIndexInformer }

func (s informerSnapshot) wait(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.services.HasSynced, s.ips.HasSynced) {
		return errors.New("the Service and IPAddress caches did not sync")
	}
	return nil
}

func (s informerSnapshot) Services(ctx context.Context) ([]*corev1.Service, error) {
	if err := s.wait(ctx); err != nil {
		return nil, fmt.Errorf("cached services: %w", err)
	}
	objs := s.services.GetIndexer().List()
	out := make([]*corev1.Service, 0, len(objs))
	for _, obj := range objs {
		if svc, ok := obj.(*corev1.Service); ok {
			out = append(out, svc)
		}
	}
	return out, nil
}

// IPAddresses looks each name up in the cache itself (an IPAddress's key
// is its name): a map of every cached IPAddress would be built at every
// start only to be read once per Service address.
func (s informerSnapshot) IPAddresses(ctx context.Context) (func(string) *networkingv1.IPAddress, error) {
	if err := s.wait(ctx); err != nil {
		return nil, fmt.Errorf("cached ipaddresses: %w", err)
	}
	indexer := s.ips.GetIndexer()
	return func(name string) *networkingv1.IPAddress {
		obj, ok, err := indexer.GetByKey(name)
		if err != nil || !ok {
			return nil
		}
		ipa, _ := obj.(*networkingv1.IPAddress)
		return ipa
	}, nil
}
