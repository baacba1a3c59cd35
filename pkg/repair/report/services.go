package report

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// ListPageSize is the first page's size in the repairs' and the
// migration's lists; NextPageSize sizes the pages after it.
const ListPageSize = 5000

// MaxListPageSize bounds NextPageSize: a page's objects are transient heap
// on both sides, the API server's included.
const MaxListPageSize = 50_000

// NextPageSize is the size of the pages after the first in a list that
// has remaining objects after its first page (its remainingItemCount; nil
// when the server did not say): about a twentieth of them, between
// ListPageSize and MaxListPageSize.
//
// Why: each page can cost the API server a walk of every key stored after
// it (etcd counts them for remainingItemCount over gRPC, as for
// kube-apiserver; a watch cache walks its index to the same end; our
// server's embedded etcd counts a list once), so a list of N objects in
// pages of P costs about N²/2P key visits besides the objects themselves,
// quadratic in N while P stays fixed. With about twenty pages the walk
// stays linear in N, up to a million objects, and a small list keeps small
// pages.
func NextPageSize(remaining *int64) int64 {
	if remaining == nil {
		return ListPageSize
	}
	return min(max(*remaining/20, ListPageSize), MaxListPageSize)
}

// ListServices lists every Service with a consistent read, in pages, oldest
// first (then by namespace/name), so that of two Services sharing an address
// or a port the older one keeps it.
//
// It returns the slim copy of each Service (internal/slim.Service: the
// fields the repairs and the migrations read, what the server's Service
// informer keeps), each an allocation of its own, read from the pages'
// bytes by ServicePages, so nothing else of a page outlives it. Keeping
// the pages whole would hold 4 to 5 GB of the job's memory at a million
// Services.
func ListServices(ctx context.Context, client kubernetes.Interface) ([]*corev1.Service, error) {
	var services []*corev1.Service
	for pages := ServicePages(client); !pages.Done(); {
		items, err := pages.Next(ctx)
		if err != nil {
			return nil, err
		}
		services = append(services, items...)
	}
	slices.SortFunc(services, OldestFirst)
	return services, nil
}

// SortOldestFirst sorts services as ListServices orders its list.
func SortOldestFirst(services []*corev1.Service) {
	slices.SortFunc(services, OldestFirst)
}

// OldestFirst orders Services as ListServices does: the older one first,
// then by namespace/name.
func OldestFirst(a, b *corev1.Service) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if a.Namespace == b.Namespace { // the usual tie: the same second, one namespace
		return strings.Compare(a.Name, b.Name)
	}
	return compareJoined(a.Namespace, a.Name, b.Namespace, b.Name)
}

// compareJoined compares ns1+"/"+name1 with ns2+"/"+name2 without building
// them (building them would cost two strings a comparison, millions of
// them to sort 100,000 Services).
func compareJoined(ns1, name1, ns2, name2 string) int {
	at := func(ns, name string, k int) (byte, bool) {
		switch {
		case k < len(ns):
			return ns[k], true
		case k == len(ns):
			return '/', true
		case k-len(ns)-1 < len(name):
			return name[k-len(ns)-1], true
		}
		return 0, false
	}
	for k := 0; ; k++ {
		c1, ok1 := at(ns1, name1, k)
		c2, ok2 := at(ns2, name2, k)
		switch {
		case !ok1 && !ok2:
			return 0
		case !ok1:
			return -1
		case !ok2:
			return 1
		case c1 != c2:
			return cmp.Compare(c1, c2)
		}
	}
}

// ServiceKey is "namespace/name", the Service field of a Problem.
func ServiceKey(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// Ordinal spells n as "1st", "2nd", "3rd", "4th"… for messages.
func Ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	default:
		return fmt.Sprintf("%dth", n)
	}
}
