// Package model names the two ClusterIP allocator models and is the one
// place that tells which one a cluster is in.
//
// Invariants:
//   - A model is spelled only through Name: "bitmap" (one RangeAllocation
//     per IP family, kube-apiserver ≤ 1.32) or "ipaddress" (one IPAddress
//     object per address over ServiceCIDRs, ≥ 1.33). "auto" is a request to
//     detect, never a model: Detect is the only code that resolves it.
//   - Detection reads, never writes: the bitmap model is in use when a
//     service-IP RangeAllocation exists under the etcd prefix. A missing map
//     is not created here, so a cluster is never moved to the bitmap model
//     by looking at it.
package model

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Name is an allocator model.
type Name string

const (
	// Bitmap is the RangeAllocation bitmap model.
	Bitmap Name = "bitmap"
	// IPAddress is the IPAddress-object model (MultiCIDRServiceAllocator).
	IPAddress Name = "ipaddress"
	// Auto asks Detect to tell the model from what etcd holds.
	Auto Name = "auto"
)

// Parse reads a --model/--allocator value; allowAuto accepts "auto".
func Parse(s string, allowAuto bool) (Name, error) {
	switch n := Name(s); n {
	case Bitmap, IPAddress:
		return n, nil
	case Auto:
		if allowAuto {
			return n, nil
		}
	}
	if allowAuto {
		return "", fmt.Errorf("unknown model %q: use bitmap, ipaddress or auto", s)
	}
	return "", fmt.Errorf("unknown model %q: use bitmap or ipaddress", s)
}

// BitmapExists reports whether a service-IP RangeAllocation (primary or
// secondary family) exists under prefix.
func BitmapExists(ctx context.Context, kv clientv3.KV, prefix string) (bool, error) {
	l := etcdlayout.Layout{Prefix: prefix}
	for _, key := range []string{l.PrimaryServiceIPRange(), l.SecondaryServiceIPRange()} {
		resp, err := kv.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return false, fmt.Errorf("look for the bitmap %s: %w", key, err)
		}
		if resp.Count > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Detect resolves n: Auto becomes Bitmap when kv is given and a bitmap
// exists under prefix, IPAddress otherwise; any other name is returned as
// is. kv may be nil (no etcd to read: the IPAddress model, read through the
// API).
func Detect(ctx context.Context, n Name, kv clientv3.KV, prefix string) (Name, error) {
	if n != Auto {
		return n, nil
	}
	if kv == nil {
		return IPAddress, nil
	}
	found, err := BitmapExists(ctx, kv, prefix)
	if err != nil {
		return "", fmt.Errorf("detect the allocator model: %w", err)
	}
	if found {
		return Bitmap, nil
	}
	return IPAddress, nil
}
