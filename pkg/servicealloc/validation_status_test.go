package servicealloc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func withIngress(s *corev1.Service, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
	out := s.DeepCopy()
	out.Status.LoadBalancer.Ingress = ingress
	return out
}

// TestValidateServiceStatusUpdate pins upstream's texts for
// status.loadBalancer, ipMode first.
func TestValidateServiceStatusUpdate(t *testing.T) {
	t.Parallel()
	vip, proxy, weird := corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPMode("Weird")
	old := lb()
	tests := []struct {
		name string
		svc  *corev1.Service
		old  *corev1.Service
		want []string
	}{
		{name: "ip with Proxy, hostname, ports and conditions", svc: func() *corev1.Service {
			s := withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.10", IPMode: &proxy,
				Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP, Error: ptr("some-error")}}},
				corev1.LoadBalancerIngress{IP: "2001:db8::10", IPMode: &vip}, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
			// Not validated by upstream either: stored as given.
			s.Status.Conditions = []metav1.Condition{{Type: "anything goes", Status: "Maybe"}}
			return s
		}()},
		{name: "ipMode without ip", svc: withIngress(old, corev1.LoadBalancerIngress{Hostname: "x.example.com", IPMode: &proxy}),
			want: []string{"status.loadBalancer.ingress[0].ipMode: Forbidden: may not be specified when `ip` is not set"}},
		{name: "unsupported ipMode", svc: withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.10", IPMode: &weird}),
			want: []string{`status.loadBalancer.ingress[0].ipMode: Unsupported value: "Weird": supported values: "Proxy", "VIP"`}},
		{name: "ip without ipMode", svc: withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.10"}),
			want: []string{"status.loadBalancer.ingress[0].ipMode: Required value: must be specified when `ip` is set"}},
		{name: "bad ip", svc: withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.256", IPMode: &vip}),
			want: []string{`status.loadBalancer.ingress[0].ip: Invalid value: "192.0.2.256": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{name: "bad ip kept from the old status", svc: withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.256", IPMode: &vip}),
			old: withIngress(old, corev1.LoadBalancerIngress{IP: "192.0.2.256"})},
		{name: "hostname not DNS", svc: withIngress(old, corev1.LoadBalancerIngress{Hostname: "Bad_Name"}),
			want: []string{`status.loadBalancer.ingress[0].hostname: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{name: "hostname is an IP", svc: withIngress(old, corev1.LoadBalancerIngress{Hostname: "192.0.2.1"}),
			want: []string{`status.loadBalancer.ingress[0].hostname: Invalid value: "192.0.2.1": must be a DNS name, not an IP address`}},
		{name: "ingress on ClusterIP", svc: withIngress(svc(), corev1.LoadBalancerIngress{IP: "192.0.2.10", IPMode: &vip}), old: svc(),
			want: []string{"status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'"}},
		{name: "conditions on ClusterIP", old: svc(), svc: func() *corev1.Service {
			s := svc()
			s.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Fine"}}
			return s
		}()},
		{name: "metadata update rules apply", svc: func() *corev1.Service {
			s := withIngress(old)
			s.Namespace = "other"
			return s
		}(), want: []string{`metadata.namespace: Invalid value: "other": field is immutable`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.old
			if o == nil {
				o = old
			}
			got := errorTexts(ValidateServiceStatusUpdate(tt.svc, o))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultLoadBalancerIPMode(t *testing.T) {
	t.Parallel()
	proxy := corev1.LoadBalancerIPModeProxy
	s := withIngress(lb(), corev1.LoadBalancerIngress{IP: "192.0.2.1"}, corev1.LoadBalancerIngress{IP: "192.0.2.2", IPMode: &proxy},
		corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
	DefaultLoadBalancerIPMode(s)
	var got []string
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if ing.IPMode == nil {
			got = append(got, "<nil>")
		} else {
			got = append(got, string(*ing.IPMode))
		}
	}
	if diff := cmp.Diff([]string{"VIP", "Proxy", "<nil>"}, got); diff != "" {
		t.Errorf("ipModes (-want +got):\n%s", diff)
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	s := lb(func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"010.0.0.1", "2001:DB8::1", "not-an-ip"}
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1/24"}
		s.Spec.ExternalName = "ignored.example.com"
		s.Annotations = map[string]string{annotationTopologyAwareHints: "auto"}
		td := corev1.ServiceTrafficDistributionPreferClose
		s.Spec.TrafficDistribution = &td
	})
	want := []string{
		"annotation service.kubernetes.io/topology-aware-hints is deprecated, please use service.kubernetes.io/topology-mode instead",
		`spec.externalIPs[0]: non-standard IP address "010.0.0.1" is invalid: use "10.0.0.1"`,
		`spec.externalIPs[1]: IPv6 address "2001:DB8::1" should be in RFC 5952 canonical format ("2001:db8::1")`,
		"spec.externalIPs is deprecated and may no longer be implemented in some clusters",
		`spec.loadBalancerSourceRanges[0]: CIDR value "192.0.2.1/24" is ambiguous in this context (should be "192.0.2.0/24" or "192.0.2.1/32"?)`,
		`spec.externalName is ignored when spec.type is not "ExternalName"`,
		`spec.trafficDistribution: "PreferClose" is deprecated; use "PreferSameZone"`,
	}
	if diff := cmp.Diff(want, WarningsForService(s, nil)); diff != "" {
		t.Errorf("spec warnings (-want +got):\n%s", diff)
	}
	vip := corev1.LoadBalancerIPModeVIP
	st := withIngress(lb(), corev1.LoadBalancerIngress{IP: "192.0.2.010", IPMode: &vip})
	if diff := cmp.Diff([]string{`status.loadBalancer.ingress[0]: non-standard IP address "192.0.2.010" is invalid: use "192.0.2.10"`},
		WarningsForServiceStatus(st)); diff != "" {
		t.Errorf("status warnings (-want +got):\n%s", diff)
	}
}
