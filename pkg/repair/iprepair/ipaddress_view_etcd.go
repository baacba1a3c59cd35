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

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair/report"
)

// newStoredView reads a one-shot pass's snapshot straight from etcd: the
// ServiceCIDRs, the Namespaces when some ServiceCIDR is scoped, the
// IPAddresses and the Services, all at the revision of the first read, the
// objects decoded as kube-apiserver stores them and each given its
// ModRevision as resourceVersion, as the API does. One revision orders the
// reads as newListView's lists must be ordered (no Service without the
// IPAddress claimed before it), and the API server neither decodes nor
// encodes two million objects for a pass over a million Services. The two
// large reads run at once.
func newStoredView(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout) (*listView, error) {
	v := &listView{
		byKey:    map[string][]*corev1.Service{},
		services: map[string]*corev1.Service{},
		ips:      map[string]*networkingv1.IPAddress{},
	}
	var cidrs []*networkingv1.ServiceCIDR
	rev, err := readStored(ctx, kv, layout.ServiceCIDRsPrefix(), 0, func(kv *mvccpb.KeyValue) error {
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
		_, err := readStored(ctx, kv, layout.NamespacesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
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
		_, err := readStored(ctx, kv, layout.IPAddressesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
			ipa, err := etcdlayout.DecodeIPAddress(kv.Value)
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
	_, err = readStored(ctx, kv, layout.ServicesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
		svc, err := etcdlayout.DecodeService(kv.Value)
		if err == nil {
			svc.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
			services = append(services, svc)
		}
		return err
	})
	if err != nil {
		cancel()
		err = fmt.Errorf("read services from etcd: %w", err)
	}
	// The read that failed first cancelled the other: its error is the one.
	if ipErr := <-ipsDone; ipErr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = ipErr
	}
	if err != nil {
		return nil, err
	}
	report.SortOldestFirst(services)
	for _, svc := range services {
		v.services[report.ServiceKey(svc)] = svc
		for _, k := range addressKeys(svc) {
			v.byKey[k] = append(v.byKey[k], svc)
		}
	}
	return v, nil
}

// readStored calls each for every key under prefix, in key order, as etcd
// held them at revision rev (0: now), read in pages that grow as the
// repairs' lists do (report.NextPageSize: etcd counts the keys after each
// page). It returns the revision read at.
func readStored(ctx context.Context, kv clientv3.KV, prefix string, rev int64, each func(*mvccpb.KeyValue) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	limit, from := int64(report.ListPageSize), prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, from, opts...)
		if err != nil {
			return 0, fmt.Errorf("read %s at revision %d: %w", prefix, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := each(kv); err != nil {
				return 0, etcdlayout.WithKey(string(kv.Key), err)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		remaining := resp.Count - int64(len(resp.Kvs))
		limit = report.NextPageSize(&remaining)
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
