package report

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ListPageSize is the page size of the repairs' and the migration's lists.
// Every page after the first is a list at the first page's resourceVersion,
// which a watch cache (ours, kube-apiserver's) answers at a cost that grows
// with the objects stored: at 100,000 Services on our server, `kubectl get
// services -A` took 45 s with pages of 500, 16 s with pages of 5,000 or
// with one list.
const ListPageSize = 5000

// ListServices lists every Service with a consistent read, in pages, oldest
// first (then by namespace/name), so that of two Services sharing an address
// or a port the older one keeps it.
func ListServices(ctx context.Context, client kubernetes.Interface) ([]corev1.Service, error) {
	var services []corev1.Service
	opts := metav1.ListOptions{Limit: ListPageSize}
	for {
		list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		services = append(services, list.Items...)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	slices.SortStableFunc(services, func(a, b corev1.Service) int { return OldestFirst(&a, &b) })
	return services, nil
}

// OldestFirst orders Services as ListServices does: the older one first,
// then by namespace/name.
func OldestFirst(a, b *corev1.Service) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(ServiceKey(a), ServiceKey(b))
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
