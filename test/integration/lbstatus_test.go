package integration

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/model"
)

// startLBServer starts a server (with repair) for the LoadBalancer tests;
// their LoadBalancers ask for no node ports (allocateLoadBalancerNodePorts:
// false) unless a test says otherwise.
func startLBServer(t *testing.T, model string, etcd *etcdtest.Etcd) *testserver.Server {
	t.Helper()
	return testserver.Start(t, testserver.Options{
		Model: model, Etcd: etcd, ServiceRange: "10.96.0.0/16", WithRepair: true,
	})
}

func newLB(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	return newService(name, append([]func(*corev1.Service){func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	}}, mutate...)...)
}

func ptrTo[T any](v T) *T { return &v }

// warningCollector records the warnings the server sends.
type warningCollector struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningCollector) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningCollector) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

func mergePatchStatus(ctx context.Context, c kubernetes.Interface, name string, status any) (*corev1.Service, error) {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, err
	}
	return c.CoreV1().Services("default").Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
}

// TestLoadBalancerStatus drives services/status as a cloud controller or a
// LoadBalancer implementation does, through the real server: valid ingress
// (ipMode Proxy and VIP, hostname, ports) is stored, upstream's refusals come
// back with upstream's texts, and a status write never changes the spec.
func TestLoadBalancerStatus(t *testing.T) {
	t.Parallel()
	forEachModel(t, func(t *testing.T, model string) {
		s := startLBServer(t, model, nil)
		ctx := testContext(t)
		c := s.Client
		svcs := c.CoreV1().Services("default")
		lb := mustCreate(t, ctx, c, newLB("lb"))

		// A full status as a controller writes it (UpdateStatus), with a spec
		// change in the same request that must be ignored.
		lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "192.0.2.10", IPMode: ptrTo(corev1.LoadBalancerIPModeProxy),
				Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP, Error: ptrTo("SomeError")}}},
			{Hostname: "lb.example.com"},
		}
		lb.Status.Conditions = []metav1.Condition{{Type: "Provisioned", Status: metav1.ConditionTrue, Reason: "Done",
			Message: "ok", LastTransitionTime: metav1.Now().Rfc3339Copy()}}
		wantStatus := *lb.Status.DeepCopy()
		wantSpec := *lb.Spec.DeepCopy()
		lb.Spec.Selector = map[string]string{"app": "changed-by-status-write"}
		got, err := svcs.UpdateStatus(ctx, lb, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update status: %v", err)
		}
		if diff := cmp.Diff(wantStatus, got.Status); diff != "" {
			t.Errorf("stored status (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantSpec, got.Spec); diff != "" {
			t.Errorf("a status write changed the spec (-want +got):\n%s", diff)
		}

		// kubectl patch --subresource=status --type=merge: an IP without
		// ipMode is defaulted to VIP.
		got, err = mergePatchStatus(ctx, c, "lb", map[string]any{"loadBalancer": map[string]any{
			"ingress": []any{map[string]any{"ip": "192.0.2.11"}, map[string]any{"ip": "2001:db8::11", "ipMode": "Proxy"}}}})
		if err != nil {
			t.Fatalf("patch status: %v", err)
		}
		var modes []string
		for _, ing := range got.Status.LoadBalancer.Ingress {
			mode := "<nil>"
			if ing.IPMode != nil {
				mode = string(*ing.IPMode)
			}
			modes = append(modes, ing.IP+"="+mode)
		}
		if diff := cmp.Diff([]string{"192.0.2.11=VIP", "2001:db8::11=Proxy"}, modes); diff != "" {
			t.Errorf("ipModes (-want +got):\n%s", diff)
		}

		// Upstream's refusals, word for word.
		refused := []struct {
			ingress map[string]any
			want    string
		}{
			{map[string]any{"hostname": "x.example.com", "ipMode": "Proxy"},
				"status.loadBalancer.ingress[0].ipMode: Forbidden: may not be specified when `ip` is not set"},
			{map[string]any{"ip": "192.0.2.10", "ipMode": "Weird"},
				`status.loadBalancer.ingress[0].ipMode: Unsupported value: "Weird": supported values: "Proxy", "VIP"`},
			{map[string]any{"ip": "192.0.2.300"},
				`status.loadBalancer.ingress[0].ip: Invalid value: "192.0.2.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`},
			{map[string]any{"hostname": "192.0.2.1"},
				`status.loadBalancer.ingress[0].hostname: Invalid value: "192.0.2.1": must be a DNS name, not an IP address`},
		}
		for _, r := range refused {
			_, err := mergePatchStatus(ctx, c, "lb", map[string]any{"loadBalancer": map[string]any{"ingress": []any{r.ingress}}})
			expectStatus(t, err, 422, r.want)
		}

		// Status writes are allowed for every type; only ingress is reserved
		// to LoadBalancers.
		mustCreate(t, ctx, c, newService("plain"))
		conds := []any{map[string]any{"type": "Ready", "status": "True", "reason": "Fine", "message": "",
			"lastTransitionTime": "2026-01-01T00:00:00Z"}}
		if got, err := mergePatchStatus(ctx, c, "plain", map[string]any{"conditions": conds}); err != nil || len(got.Status.Conditions) != 1 {
			t.Fatalf("conditions on a ClusterIP Service: %v", err)
		}
		_, err = mergePatchStatus(ctx, c, "plain", map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": "192.0.2.1"}}}})
		expectStatus(t, err, 422, "status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'")

		// A spec update keeps the status; turning the LoadBalancer into a
		// ClusterIP Service clears its load-balancer status and drops the
		// fields only a LoadBalancer can have (the client did not touch them).
		got, err = svcs.Patch(ctx, "lb", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
		if err != nil || len(got.Status.LoadBalancer.Ingress) != 2 {
			t.Fatalf("label patch: %v, ingress %v", err, got.Status.LoadBalancer.Ingress)
		}
		got, err = svcs.Patch(ctx, "lb", types.MergePatchType, []byte(`{"spec":{"type":"ClusterIP"}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("LoadBalancer to ClusterIP: %v", err)
		}
		if len(got.Status.LoadBalancer.Ingress) != 0 || got.Spec.AllocateLoadBalancerNodePorts != nil || got.Spec.ExternalTrafficPolicy != "" {
			t.Errorf("after LoadBalancer → ClusterIP: status %+v, allocateLoadBalancerNodePorts %v, externalTrafficPolicy %q",
				got.Status.LoadBalancer, got.Spec.AllocateLoadBalancerNodePorts, got.Spec.ExternalTrafficPolicy)
		}
		if len(got.Status.Conditions) != 1 {
			t.Errorf("conditions lost on a type change: %v", got.Status.Conditions)
		}
	})
}

// TestExternalFieldsValidation checks the spec fields of external exposure
// through the API: upstream's texts, class immutability, and the warnings
// upstream sends for accepted but non-canonical values.
func TestExternalFieldsValidation(t *testing.T) {
	t.Parallel()
	s := startLBServer(t, string(model.IPAddress), nil)
	ctx := testContext(t)
	warnings := &warningCollector{}
	cfg := rest.CopyConfig(s.RESTConfig)
	cfg.WarningHandler = warnings
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svcs := c.CoreV1().Services("default")

	refused := []struct {
		svc  *corev1.Service
		want string
	}{
		{newService("class-on-clusterip", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptrTo("example.com/lb") }),
			"spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"},
		{newLB("bad-class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptrTo("a b") }),
			`spec.loadBalancerClass: Invalid value: "a b": name part must consist of alphanumeric characters`},
		{newService("ranges-on-clusterip", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} }),
			"spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'"},
		{newLB("bad-range", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/33"} }),
			`spec.LoadBalancerSourceRanges[0]: Invalid value: "192.0.2.0/33": must be a valid CIDR value`},
		{newService("loopback-external", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.1"} }),
			`spec.externalIPs[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{newService("etp-on-clusterip", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			`spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services`},
		{newLB("bad-etp", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = "Everywhere" }),
			`spec.externalTrafficPolicy: Unsupported value: "Everywhere": supported values: "Cluster", "Local"`},
		{newService("bad-itp", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicy("Node"))
		}),
			`spec.internalTrafficPolicy: Unsupported value: "Node": supported values: "Cluster", "Local"`},
		{newService("affinity", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](0)}}
		}), "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400"},
		{newService("alnp-on-clusterip", func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptrTo(true) }),
			"spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'"},
	}
	for _, r := range refused {
		_, err := svcs.Create(ctx, r.svc, metav1.CreateOptions{})
		expectStatus(t, err, 422, r.want)
	}

	// A non-canonical external IP is refused at this API level (strict
	// parsing); a canonical one is accepted with upstream's
	// deprecation warning, and the traffic policy is defaulted for a
	// ClusterIP Service with external IPs (externally accessible).
	_, err = svcs.Create(ctx, newService("ext", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.010"} }), metav1.CreateOptions{})
	expectStatus(t, err, 422, `spec.externalIPs[0]: Invalid value: "192.0.2.010": must not have leading 0s`)
	warnings.take()
	ext, err := svcs.Create(ctx, newService("ext", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.10"} }), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create with an external IP: %v", err)
	}
	if diff := cmp.Diff([]string{"spec.externalIPs is deprecated and may no longer be implemented in some clusters"}, warnings.take()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if ext.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster {
		t.Errorf("externalTrafficPolicy of a ClusterIP Service with external IPs: %q, want Cluster", ext.Spec.ExternalTrafficPolicy)
	}

	full := mustCreateIn(t, ctx, svcs, newLB("full", func(s *corev1.Service) {
		s.Spec.LoadBalancerClass = ptrTo("example.com/lb")
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/64"}
		s.Spec.ExternalIPs = []string{"198.51.100.7"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
	}))
	if got := *full.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; got != 10800 {
		t.Errorf("default ClientIP timeout %d, want 10800", got)
	}
	_, err = svcs.Patch(ctx, "full", types.MergePatchType, []byte(`{"spec":{"loadBalancerClass":"example.com/other"}}`), metav1.PatchOptions{})
	expectStatus(t, err, 422, `spec.loadBalancerClass: Invalid value: "example.com/other": may not change once set`)
}

func mustCreateIn(t *testing.T, ctx context.Context, svcs interface {
	Create(context.Context, *corev1.Service, metav1.CreateOptions) (*corev1.Service, error)
}, svc *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := svcs.Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", svc.Name, err)
	}
	return out
}
