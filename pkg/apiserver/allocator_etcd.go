package apiserver

import (
	"context"
	"fmt"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/ipallocator/dualwrite"
	"github.com/allocator/allocator/pkg/subrange"
)

// EtcdBitmapFactory builds the bitmap model on the server's etcd: one
// RangeAllocation per family at the keys kube-apiserver uses, shared by every
// replica and kept across restarts. Like kube-apiserver, it creates each key,
// empty, when it is missing (create-if-absent, so replicas starting together
// cannot clobber each other), and re-ranges a stored map of another range of the same family
// (pkg/bitmap Open).
func EtcdBitmapFactory(ctx context.Context, spec AllocatorSpec) (allocation.Interface, error) {
	rng, err := subrange.New(spec.Prefix, subrange.ModelBitmap)
	if err != nil {
		return nil, fmt.Errorf("service range %s: %w", spec.Prefix, err)
	}
	a, err := bitmap.NewEtcdAllocator(spec.Etcd, spec.RangeKey(), rng, bitmap.EtcdOptions{})
	if err != nil {
		return nil, fmt.Errorf("service range %s: %w", spec.Prefix, err)
	}
	if _, err := a.Initialize(ctx); err != nil {
		return nil, fmt.Errorf("service range %s: %w", spec.Prefix, err)
	}
	if spec.Transition == nil {
		return a, nil
	}
	client, err := loopbackClient(spec)
	if err != nil {
		return nil, err
	}
	return dualwrite.NewBitmapReplica(a, spec.Transition, client), nil
}
