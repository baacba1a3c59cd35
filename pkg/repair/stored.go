package repair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair/report"
)

// StoredObjects is the etcd a cluster's objects are stored in, as
// kube-apiserver stores them.
type StoredObjects interface {
	// Etcd returns a client of that etcd, which the caller does not close,
	// and the layout of its keys.
	Etcd(ctx context.Context) (clientv3.KV, etcdlayout.Layout, error)
}

// ListInstead reports whether err, from a read of stored objects, means
// the objects are to be listed through the API server instead: etcd refused
// the read (a job whose etcd role covers only the maps, leases and records
// it writes) or an object is encrypted at rest.
func ListInstead(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, etcdlayout.ErrEncrypted)
}

// StoredServices is a ServiceSource that reads every Service straight from
// etcd, at one revision: a read of etcd is linearizable, so it reflects
// every write committed before it, as a pass needs. The API server then
// neither decodes nor encodes them. When etcd cannot give them
// (ListInstead), they are listed through Client. With Handoff, each read
// from etcd is also handed to the IPAddress pass that runs next.
type StoredServices struct {
	Stored  StoredObjects
	Client  kubernetes.Interface
	Handoff *ServicesHandoff
}

// Services reads every stored Service, oldest first.
func (s StoredServices) Services(ctx context.Context) ([]*corev1.Service, error) {
	kv, layout, err := s.Stored.Etcd(ctx)
	if err != nil {
		return nil, err
	}
	services, rev, err := ReadStoredServices(ctx, kv, layout, 0)
	if ListInstead(err) {
		return report.ListServices(ctx, s.Client)
	}
	if err != nil {
		return nil, err
	}
	report.SortOldestFirst(services)
	if s.Handoff != nil {
		s.Handoff.put(ServicesRead{Services: services, Revision: rev})
	}
	return services, nil
}

// ServicesRead is every Service stored at Revision, oldest first.
type ServicesRead struct {
	Services []*corev1.Service
	Revision int64
}

// ServicesHandoff hands the Services a job's node-port pass read from etcd
// to the IPAddress pass that runs after it in the same run, which then
// reads its other objects at the revision of that read rather than reading
// every Service again. A map pass must read its Services after its map;
// the IPAddress pass needs only a snapshot at one revision, which the
// handed-off read and the reads at its revision are.
type ServicesHandoff struct {
	mu   sync.Mutex
	read *ServicesRead // guarded by mu
}

// put hands off r, replacing any read not taken.
func (h *ServicesHandoff) put(r ServicesRead) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.read = &r
}

// Take returns the read handed off and forgets it (so that a pass never
// takes one read twice, and nothing keeps it once it is taken); ok is false
// when there is none.
func (h *ServicesHandoff) Take() (_ ServicesRead, ok bool) {
	if h == nil {
		return ServicesRead{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.read
	h.read = nil
	if r == nil {
		return ServicesRead{}, false
	}
	return *r, true
}

// ReadStoredServices reads every Service stored under layout at revision
// rev (0: now), in key order, each as its slim copy (slim.StoredService:
// the fields the repairs read) with its ModRevision as resourceVersion, as
// the API gives it. It returns the revision read at.
func ReadStoredServices(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout, rev int64) ([]*corev1.Service, int64, error) {
	var services []*corev1.Service
	rev, err := ReadStored(ctx, kv, layout.ServicesPrefix(), rev, func(kv *mvccpb.KeyValue) error {
		svc, err := slim.StoredService(kv.Value)
		if err == nil {
			svc.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
			services = append(services, svc)
		}
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read services from etcd: %w", err)
	}
	return services, rev, nil
}

// ReadStored calls each for every key under prefix, in key order, as etcd
// held them at revision rev (0: now), and returns the revision read at. It
// streams the range (etcd 3.7's RangeStream: chunks at one revision, the
// keys counted once, at the end); from an etcd that does not stream, it
// reads pages that grow as the repairs' lists do (report.NextPageSize),
// because etcd counts every key after each page. An error of each is
// returned with the key it was called for (etcdlayout.KeyError).
func ReadStored(ctx context.Context, kv clientv3.KV, prefix string, rev int64, each func(*mvccpb.KeyValue) error) (int64, error) {
	read, streamed, err := readStream(ctx, kv, prefix, rev, each)
	if streamed {
		return read, err
	}
	return readPages(ctx, kv, prefix, rev, each)
}

// readStream is ReadStored through one RangeStream; streamed is false, and
// nothing was read, when etcd does not know the call.
func readStream(ctx context.Context, kv clientv3.KV, prefix string, rev int64, each func(*mvccpb.KeyValue) error) (_ int64, streamed bool, _ error) {
	ctx, cancel := context.WithCancel(ctx)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	chunks, err := kv.GetStream(ctx, prefix, opts...)
	if err != nil {
		cancel()
		if status.Code(err) == codes.Unimplemented {
			return 0, false, nil
		}
		return 0, true, fmt.Errorf("read %s at revision %d: %w", prefix, rev, err)
	}
	defer func() {
		// The client's goroutine ends once it has handed over what it
		// received after the cancel.
		cancel()
		for range chunks {
		}
	}()
	read := int64(0)
	for first := true; ; first = false {
		chunk, ok := <-chunks
		if !ok {
			break
		}
		if err := chunk.Err(); err != nil {
			if first && status.Code(err) == codes.Unimplemented {
				return 0, false, nil
			}
			return 0, true, fmt.Errorf("read %s at revision %d: %w", prefix, rev, err)
		}
		for _, kv := range chunk.Kvs {
			if err := each(kv); err != nil {
				return 0, true, etcdlayout.WithKey(string(kv.Key), err)
			}
		}
		if chunk.Header != nil {
			read = chunk.Header.Revision // the revision read at when rev is 0
		}
	}
	if read == 0 {
		return 0, true, fmt.Errorf("read %s at revision %d: the stream ended without its revision", prefix, rev)
	}
	if rev != 0 {
		return rev, true, nil // the header holds etcd's revision now
	}
	return read, true, nil
}

// readPages is ReadStored in pages of Range.
func readPages(ctx context.Context, kv clientv3.KV, prefix string, rev int64, each func(*mvccpb.KeyValue) error) (int64, error) {
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
