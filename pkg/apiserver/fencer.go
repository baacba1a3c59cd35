package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/fence"
)

// serviceFencer is the servicealloc.Fencer of the Services' store, whose
// writes fence.Guard guards (etcd_stores.go). It closes fences through the
// server's own etcd client.
type serviceFencer struct {
	client *clientv3.Client
	layout etcdlayout.Layout
}

func (f serviceFencer) Guard(ctx context.Context) context.Context {
	return fence.NewContext(ctx, fence.New(f.layout))
}

func (f serviceFencer) Close(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	fc := fence.FromContext(ctx)
	if fc == nil {
		return nil, errors.New("the request has no fence to close")
	}
	kv, err := fc.Close(ctx, f.client, f.layout.Service(namespace, name))
	if err != nil || kv == nil {
		return nil, err
	}
	svc, err := etcdlayout.DecodeService(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("read back Service %s/%s: %w", namespace, name, err)
	}
	svc.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
	return svc, nil
}
