package iprepair

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TypeDisagreement marks an address on which the bitmap and the IPAddress
// objects disagree while both are kept (a model transition, see
// internal/transition). The servers' repair controllers resolve these; the
// standalone job only reports them.
const TypeDisagreement = "disagreement"

// CompareModels reports every address inside a bitmap's window that one
// record holds and the other does not: a bit with no IPAddress (an
// allocation of a bitmap-model writer not carried over yet, or a leaked
// bit), or an IPAddress with no bit (an allocation made while dual write was
// off, or a missing bit). Stores whose key does not exist are skipped. It
// changes nothing.
func CompareModels(ctx context.Context, client kubernetes.Interface, stores []BitmapStore) ([]report.Problem, error) {
	list, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("compare models: list IPAddresses: %w", err)
	}
	objects := map[netip.Addr]string{}
	for _, o := range list.Items {
		ip, err := netip.ParseAddr(o.Name)
		if err != nil {
			continue
		}
		parent := "" // the Service holding it, none when its parent is no Service
		if ipaddress.ParentIsService(&o) {
			parent = o.Spec.ParentRef.Namespace + "/" + o.Spec.ParentRef.Name
		}
		objects[ip] = parent
	}
	var problems []report.Problem
	for _, store := range stores {
		stored, err := store.ReadStored(ctx)
		if err != nil {
			return nil, fmt.Errorf("compare models: %w", err)
		}
		if !stored.Exists() {
			continue
		}
		rng := store.Range()
		bits, err := bitset.New(int(rng.Size()), int(rng.StaticSize()))
		if err != nil {
			return nil, fmt.Errorf("compare models: %w", err)
		}
		if err := bits.SetBytes(stored.Data); err != nil {
			return nil, fmt.Errorf("compare models: stored map of %s: %w", rng.Prefix(), err)
		}
		inBitmap := map[netip.Addr]bool{}
		bits.ForEach(func(i int) {
			if ip, ok := rng.Addr(uint64(i)); ok {
				inBitmap[ip] = true
				if _, has := objects[ip]; !has {
					problems = append(problems, report.Problem{Type: TypeDisagreement, IP: ip.String(),
						Message: fmt.Sprintf("%s is set in the bitmap of %s but has no IPAddress", ip, rng.Prefix())})
				}
			}
		})
		for ip, parent := range objects {
			if rng.Contains(ip) && !inBitmap[ip] {
				problems = append(problems, report.Problem{Type: TypeDisagreement, IP: ip.String(), Service: parent,
					Message: fmt.Sprintf("IPAddress %s has no bit in the bitmap of %s", ip, rng.Prefix())})
			}
		}
	}
	slices.SortFunc(problems, func(a, b report.Problem) int {
		return netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP))
	})
	return problems, nil
}

// CompareModelsSettled is CompareModels made twice, settle apart, and
// reports only the disagreements both comparisons found. While dual write is
// on, every bitmap-model allocation has no IPAddress until the servers'
// repair creates it, moments later, and every release frees the bit and the
// IPAddress one after the other: a single comparison of a serving cluster
// reports those in-flight allocations and releases as disagreements. One that
// lasts settle is not in flight. The second comparison is skipped when the
// first finds nothing.
func CompareModelsSettled(ctx context.Context, client kubernetes.Interface, stores []BitmapStore, settle time.Duration) ([]report.Problem, error) {
	first, err := CompareModels(ctx, client, stores)
	if err != nil || len(first) == 0 {
		return first, err
	}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("compare models: %w", ctx.Err())
	case <-time.After(settle):
	}
	second, err := CompareModels(ctx, client, stores)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(second, func(p report.Problem) bool {
		return !slices.ContainsFunc(first, func(q report.Problem) bool {
			return q.Type == p.Type && q.IP == p.IP && q.Message == p.Message
		})
	}), nil
}
