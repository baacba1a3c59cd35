package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// serviceFencer is the servicealloc.Fencer of the Services' store, whose
// writes fence.Guard guards (etcd_stores.go). It closes fences through the
// server's own etcd client.
type serviceFencer struct {
	client *clientv3.Client
	layout etcdlayout.Layout
}

// fencer is the server's serviceFencer.
func (s *Server) fencer() serviceFencer {
	return serviceFencer{client: s.etcd, layout: etcdlayout.Layout{Prefix: s.cfg.EtcdPrefix}}
}

var errNoFence = errors.New("the request has no fence")

func (f serviceFencer) Guard(ctx context.Context) context.Context {
	return fence.NewContext(ctx, fence.New(f.layout))
}

func (f serviceFencer) Done(ctx context.Context) {
	if fc := fence.FromContext(ctx); fc != nil {
		fc.Done()
	}
}

func (f serviceFencer) Close(ctx context.Context, namespace, name string) (servicealloc.FenceOutcome, error) {
	fc := fence.FromContext(ctx)
	if fc == nil {
		return servicealloc.FenceOutcome{}, errNoFence
	}
	o, err := fc.Close(ctx, f.client, f.layout.Service(namespace, name))
	if errors.Is(err, fence.ErrOutcomeLost) {
		return servicealloc.FenceOutcome{}, fmt.Errorf("%w: %w", servicealloc.ErrWritesEnded, err)
	}
	if err != nil {
		return servicealloc.FenceOutcome{}, err
	}
	stored, err := decodeService(o.Current)
	if err != nil {
		return servicealloc.FenceOutcome{}, fmt.Errorf("read back Service %s/%s: %w", namespace, name, err)
	}
	return servicealloc.FenceOutcome{Landed: o.Landed, Delete: o.Delete, Stored: stored}, nil
}

func (f serviceFencer) Replaced(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	fc := fence.FromContext(ctx)
	if fc == nil {
		return nil, errNoFence
	}
	kv, err := fc.Replaced(ctx, f.client, f.layout.Service(namespace, name))
	if err != nil {
		return nil, err
	}
	svc, err := decodeService(kv)
	if err != nil {
		return nil, fmt.Errorf("read Service %s/%s as it was before the request's write: %w", namespace, name, err)
	}
	return svc, nil
}

// decodeService decodes a stored Service, with its resourceVersion; nil for
// nil.
func decodeService(kv *mvccpb.KeyValue) (*corev1.Service, error) {
	if kv == nil {
		return nil, nil
	}
	svc, err := etcdlayout.DecodeService(kv.Value)
	if err != nil {
		return nil, err
	}
	svc.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
	return svc, nil
}

// ipAddressCreated is the ipaddresses.CreateOutcome of the server's claims,
// made under the Service request's fence (fence.GuardClaims: a claim is
// known by the IPAddress it wrote, which must still be there).
func (f serviceFencer) ipAddressCreated(ctx context.Context, name string) (bool, error) {
	fc := fence.FromContext(ctx)
	if fc == nil {
		return false, errNoFence
	}
	o, err := fc.Close(ctx, f.client, f.layout.IPAddress(name))
	return o.Landed, err
}
