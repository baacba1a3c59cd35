package servicealloc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// errorTexts renders errs the way an Invalid status lists its causes.
func errorTexts(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func lb(mutate ...func(*corev1.Service)) *corev1.Service {
	return svc(append([]func(*corev1.Service){func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"10.0.0.10"}
		s.Spec.ClusterIP = "10.0.0.10"
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		s.Spec.AllocateLoadBalancerNodePorts = ptr(true)
	}}, mutate...)...)
}

// TestValidateExternalFields pins upstream's texts for the fields of external
// exposure, one case per rule.
func TestValidateExternalFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{name: "full LoadBalancer", svc: lb(func(s *corev1.Service) {
			s.Spec.LoadBalancerClass = ptr("example.com/lb")
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", " 2001:db8::/64 "}
			s.Spec.ExternalIPs = []string{"198.51.100.1", "2001:db8::1"}
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](10800)}}
			s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferClose)
		})},
		{name: "class on ClusterIP", svc: svc(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/lb") }),
			want: []string{"spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"}},
		{name: "class not a qualified name", svc: lb(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("-bad/") }),
			want: []string{`spec.loadBalancerClass: Invalid value: "-bad/": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
				`spec.loadBalancerClass: Invalid value: "-bad/": name part must be non-empty`,
				`spec.loadBalancerClass: Invalid value: "-bad/": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`}},
		{name: "source ranges on NodePort", svc: svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
		}), want: []string{"spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'"}},
		{name: "source range not a CIDR", svc: lb(func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"} }),
			want: []string{`spec.LoadBalancerSourceRanges[0]: Invalid value: "192.0.2.1": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{name: "source range annotation on ClusterIP", svc: svc(func(s *corev1.Service) {
			s.Annotations = map[string]string{annotationLoadBalancerSourceRanges: "192.0.2.0/24,nope"}
		}), want: []string{"metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]: Forbidden: may only be used when `type` is 'LoadBalancer'",
			`metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges]: Invalid value: "nope": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}},
		{name: "external IPs", svc: svc(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"192.0.2.300", "0.0.0.0", "127.0.0.1", "169.254.1.1", "224.0.0.5", "::1", "fe80::1"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}), want: []string{
			`spec.externalIPs[0]: Invalid value: "192.0.2.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
			`spec.externalIPs[1]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)`,
			`spec.externalIPs[2]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`,
			`spec.externalIPs[3]: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)`,
			`spec.externalIPs[4]: Invalid value: "224.0.0.5": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`,
			`spec.externalIPs[5]: Invalid value: "::1": may not be in the loopback range (127.0.0.0/8, ::1/128)`,
			`spec.externalIPs[6]: Invalid value: "fe80::1": may not be in the link-local range (169.254.0.0/16, fe80::/10)`,
		}},
		{name: "external traffic policy on plain ClusterIP", svc: svc(func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			want: []string{`spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services`}},
		{name: "external traffic policy on ClusterIP with external IPs", svc: svc(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"192.0.2.1"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})},
		{name: "external traffic policy value", svc: lb(func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = "Global" }),
			want: []string{`spec.externalTrafficPolicy: Unsupported value: "Global": supported values: "Cluster", "Local"`}},
		{name: "internal traffic policy value", svc: svc(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicy("Node"))
		}),
			want: []string{`spec.internalTrafficPolicy: Unsupported value: "Node": supported values: "Cluster", "Local"`}},
		{name: "traffic distribution", svc: svc(func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr("Anywhere") }),
			want: []string{`spec.trafficDistribution: Unsupported value: "Anywhere": supported values: "PreferClose", "PreferSameZone", "PreferSameNode"`}},
		{name: "allocateLoadBalancerNodePorts on NodePort", svc: svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
		}), want: []string{"spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'"}},
		{name: "headless LoadBalancer", svc: lb(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
			want: []string{`spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for LoadBalancer services`}},
		{name: "affinity config with None", svc: svc(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityNone
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}), want: []string{"spec.sessionAffinityConfig: Forbidden: must not be set when session affinity is None"}},
		{name: "affinity ClientIP without config", svc: svc(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
			want: []string{"spec.sessionAffinityConfig: Required value: when session affinity type is ClientIP"}},
		{name: "affinity timeout too long", svc: svc(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](86401)}}
		}), want: []string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorTexts(ValidateService(tt.svc))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateExternalFieldsUpdate: values the stored Service already had are
// not checked again (a Service an older release accepted, e.g. with a
// loopback external IP, stays editable),
// new ones are; the class of a LoadBalancer is immutable.
func TestValidateExternalFieldsUpdate(t *testing.T) {
	t.Parallel()
	legacy := lb(func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"127.0.0.1"}
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"}
		s.Spec.LoadBalancerClass = ptr("example.com/a")
	})
	// An old external IP is not parsed again, but must still be one
	// traffic can reach: upstream checks that on every update too.
	const loopback0 = `spec.externalIPs[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`
	tests := []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{name: "label change keeps old values", svc: lb(func(s *corev1.Service) {
			s.Labels = map[string]string{"x": "y"}
			s.Spec.ExternalIPs = []string{"127.0.0.1"}
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"}
			s.Spec.LoadBalancerClass = ptr("example.com/a")
		}), want: []string{loopback0}},
		{name: "new bad external IP", svc: lb(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"127.0.0.1", "127.0.0.2"}
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"}
			s.Spec.LoadBalancerClass = ptr("example.com/a")
		}), want: []string{loopback0, `spec.externalIPs[1]: Invalid value: "127.0.0.2": may not be in the loopback range (127.0.0.0/8, ::1/128)`}},
		{name: "class changed", svc: lb(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"127.0.0.1"}
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"}
			s.Spec.LoadBalancerClass = ptr("example.com/b")
		}), want: []string{`spec.loadBalancerClass: Invalid value: "example.com/b": may not change once set`, loopback0}},
		{name: "class removed", svc: lb(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"127.0.0.1"}
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1"}
		}), want: []string{`spec.loadBalancerClass: Invalid value: null: may not change once set`, loopback0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorTexts(append(validateSpecUpdate(tt.svc, legacy), validateService(tt.svc, legacy)...))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	// The same legacy values on a create are refused.
	want := []string{`spec.externalIPs[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`,
		`spec.LoadBalancerSourceRanges[0]: Invalid value: "192.0.2.1": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)`}
	if diff := cmp.Diff(want, errorTexts(ValidateService(legacy))); diff != "" {
		t.Errorf("create with legacy values (-want +got):\n%s", diff)
	}
}

// TestDropExternalFields: turning a LoadBalancer into a ClusterIP Service
// with a patch of the type alone is accepted, because the fields only a
// LoadBalancer can have are dropped when the client did not change them.
func TestDropTypeDependentFields(t *testing.T) {
	t.Parallel()
	old := lb(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/a") })
	updated := old.DeepCopy()
	updated.Spec.Type = corev1.ServiceTypeClusterIP
	if errs := validateService(updated, old); len(errs) == 0 {
		t.Fatalf("before the drop the update must be invalid")
	}
	dropTypeDependentFields(updated, old)
	if errs := validateService(updated, old); len(errs) > 0 {
		t.Errorf("after the drop: %v", errs)
	}
	if updated.Spec.LoadBalancerClass != nil || updated.Spec.AllocateLoadBalancerNodePorts != nil || updated.Spec.ExternalTrafficPolicy != "" {
		t.Errorf("not dropped: %+v", updated.Spec)
	}
	// A value the client changed is kept, and refused.
	changed := old.DeepCopy()
	changed.Spec.Type = corev1.ServiceTypeClusterIP
	changed.Spec.LoadBalancerClass = ptr("example.com/b")
	dropTypeDependentFields(changed, old)
	if diff := cmp.Diff([]string{"spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"}, errorTexts(validateService(changed, old))); diff != "" {
		t.Errorf("changed class (-want +got):\n%s", diff)
	}
}
