package iprepair

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// newStoredView reads a one-shot pass's snapshot straight from etcd: the
// ServiceCIDRs, the Namespaces when some ServiceCIDR is scoped, the
// IPAddresses and the Services, all at the revision of the first read, the
// objects decoded as kube-apiserver stores them (the Services and
// IPAddresses as the server's informers keep them: package slim) and each
// given its ModRevision as resourceVersion, as the API does. One revision
// orders the reads as newListView's lists must be ordered (no Service
// without the IPAddress claimed before it), and the API server neither
// decodes nor encodes two million objects for a pass over a million
// Services. The two large reads run at once. Given the Services of an
// earlier read (handed, repair.ServicesHandoff), it reads the rest at that
// read's revision instead.
func newStoredView(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout, handed *repair.ServicesRead) (*listView, error) {
	v := &listView{
		byKey:    map[string][]*corev1.Service{},
		services: map[string]*corev1.Service{},
		ips:      map[string]*networkingv1.IPAddress{},
	}
	var cidrs []*networkingv1.ServiceCIDR
	at := int64(0)
	if handed != nil {
		at = handed.Revision
	}
	rev, err := repair.ReadStored(ctx, kv, layout.ServiceCIDRsPrefix(), at, func(kv *mvccpb.KeyValue) error {
		sc, err := etcdlayout.DecodeServiceCIDR(kv.Value)
		if err == nil {
			sc.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
			cidrs = append(cidrs, sc)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read servicecidrs from etcd: %w", err)
	}
	v.ranges = newServiceCIDRs(cidrs)
	if v.ranges.scoped {
		v.namespaces = map[string]labels.Set{}
		_, err := repair.ReadStored(ctx, kv, layout.NamespacesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
			ns, err := etcdlayout.DecodeNamespace(kv.Value)
			if err == nil {
				v.namespaces[ns.Name] = ns.Labels
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read namespaces for ServiceCIDR scopes from etcd: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ipsDone := make(chan error, 1)
	go func() {
		_, err := repair.ReadStored(ctx, kv, layout.IPAddressesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
			ipa, err := slim.StoredIPAddress(kv.Value)
			if err == nil {
				ipa.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
				v.ips[ipa.Name] = ipa
			}
			return err
		})
		if err != nil {
			cancel()
			err = fmt.Errorf("read ipaddresses from etcd: %w", err)
		}
		ipsDone <- err
	}()
	var services []*corev1.Service
	if handed != nil {
		services = handed.Services
	} else {
		services, _, err = repair.ReadStoredServices(ctx, kv, layout, rev)
		if err != nil {
			cancel()
		}
	}
	// The read that failed first cancelled the other: its error is the one.
	if ipErr := <-ipsDone; ipErr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = ipErr
	}
	if err != nil {
		return nil, err
	}
	if handed == nil {
		report.SortOldestFirst(services)
	}
	for _, svc := range services {
		v.services[report.ServiceKey(svc)] = svc
		for _, k := range addressKeys(svc) {
			v.byKey[k] = append(v.byKey[k], svc)
		}
	}
	return v, nil
}
