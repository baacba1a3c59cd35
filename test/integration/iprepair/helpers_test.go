package iprepair_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// servicesByIP lists every Service and maps its ClusterIP to namespace/name,
// failing the test if two Services share one.
func servicesByIP(t *testing.T, ctx context.Context, client kubernetes.Interface) map[string]string {
	t.Helper()
	services, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]string{}
	for _, svc := range services.Items {
		ip := svc.Spec.ClusterIP
		if other, dup := byIP[ip]; dup {
			t.Fatalf("%s held by %s and %s", ip, other, svc.Name)
		}
		byIP[ip] = svc.Namespace + "/" + svc.Name
	}
	return byIP
}
