package servicecidr_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/testserver"
)

// warnings collects the warnings a client receives.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// take returns the warnings received since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.text
	w.text = nil
	return out
}

// warningClient is a client of srv whose warnings land in the returned
// collector.
func warningClient(t *testing.T, srv *testserver.Server) (kubernetes.Interface, *warnings) {
	t.Helper()
	cfg := rest.CopyConfig(srv.RESTConfig)
	seen := &warnings{}
	cfg.WarningHandler = seen
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, seen
}

func containsAny(texts []string, want string) bool {
	for _, s := range texts {
		if strings.Contains(s, want) {
			return true
		}
	}
	return false
}

// clusterIPService is a ClusterIP Service; ip "" asks for a dynamic pick.
func clusterIPService(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: ip,
			Ports:     []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// createServiceCIDR creates a ServiceCIDR with annotations (key, value
// pairs) through c.
func createServiceCIDR(ctx context.Context, c kubernetes.Interface, name string, cidrs []string, kv ...string) (*networkingv1.ServiceCIDR, error) {
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	if len(kv) > 0 {
		sc.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			sc.Annotations[kv[i]] = kv[i+1]
		}
	}
	return c.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{})
}

// annotate sets (value non-nil) or removes (nil) one annotation of a
// ServiceCIDR with a merge patch, as `kubectl annotate` does.
func annotate(ctx context.Context, c kubernetes.Interface, name, key string, value *string) (*networkingv1.ServiceCIDR, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	if err != nil {
		return nil, err
	}
	return c.NetworkingV1().ServiceCIDRs().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
}

func ptr(s string) *string { return &s }
