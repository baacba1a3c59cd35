package apiserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
)

// checkScopes warns once at start when ServiceCIDRs are scoped but a writer
// that ignores scopes allocates on this etcd: this server in the bitmap
// model, bitmap-model replicas, or a kube-apiserver. Their allocations land
// anywhere in the ranges they serve; design.md §11 says what then holds.
func (s *Server) checkScopes(hc genericapiserver.PostStartHookContext) error {
	ctx, cancel := context.WithTimeout(hc.Context, 30*time.Second)
	defer cancel()
	client, err := controllerClient(hc.LoopbackClientConfig)
	if err != nil {
		logger(ctx).Error(err, "Cannot check ServiceCIDR scopes")
		return nil
	}
	etcd := s.etcd
	if s.cfg.InMemory {
		etcd = nil
	}
	warning, err := ScopeWarning(ctx, client, etcd, s.cfg.EtcdPrefix, s.cfg.Model)
	if err != nil {
		logger(ctx).Error(err, "Cannot check ServiceCIDR scopes")
		return nil
	}
	if warning != "" {
		logger(ctx).Info("Warning: " + warning)
	}
	return nil
}

// ScopeWarning returns the start-up warning about writers that ignore
// ServiceCIDR scopes, or "" when no ServiceCIDR is scoped or every writer
// honours scopes. self is this server's model; etcd may be nil (in-memory).
func ScopeWarning(ctx context.Context, client kubernetes.Interface, etcd *clientv3.Client, prefix string, self model.Name) (string, error) {
	list, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list servicecidrs: %w", err)
	}
	var scoped []string
	for _, sc := range list.Items {
		if scope.Scoped(sc.Annotations) {
			scoped = append(scoped, sc.Name)
		}
	}
	if len(scoped) == 0 {
		return "", nil
	}
	var writers []string
	if !ipallocator.HonoursScopes(self) {
		writers = append(writers, "this server (--allocator=bitmap)")
	}
	if etcd != nil {
		others, err := transition.WritersIgnoringScopes(ctx, etcd, prefix, time.Now())
		if err != nil {
			return "", err
		}
		writers = append(writers, others...)
	}
	if len(writers) == 0 {
		return "", nil
	}
	verb := "allocate"
	if len(writers) == 1 {
		verb = "allocates"
	}
	return fmt.Sprintf("ServiceCIDR %s %s scoped, but %s %s ClusterIPs ignoring scopes: their Services can get addresses of any ServiceCIDR they serve (the repair reports them as outOfScope)",
		strings.Join(scoped, ", "), isAre(len(scoped)), strings.Join(writers, ", "), verb), nil
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
