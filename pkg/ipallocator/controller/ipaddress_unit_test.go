package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestIPAddressServiceCIDRsContains(t *testing.T) {
	cidrs := newServiceCIDRs([]*networkingv1.ServiceCIDR{
		{Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24", "fd00::/120"}}},
		{Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"fd01::/48", "10.1.0.0/32", "not-a-cidr"}}},
	})
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"10.0.0.1", true},
		{"10.0.0.254", true},
		{"10.0.0.0", false},   // network address
		{"10.0.0.255", false}, // IPv4 broadcast
		{"10.0.1.1", false},
		{"10.1.0.0", false}, // a /32 has no usable address
		{"fd00::ff", true},  // the IPv6 last address is usable
		{"fd00::", false},
		{"fd01::1:2:3", true}, // a prefix the allocator refuses still covers its addresses
		{"fd01::", false},
	} {
		ip, ok := parseServiceIP(tc.ip)
		if !ok {
			t.Fatalf("parse %s", tc.ip)
		}
		if got := cidrs.contains(ip); got != tc.want {
			t.Errorf("contains(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

func TestIPAddressKeys(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type:       corev1.ServiceTypeClusterIP,
		ClusterIPs: []string{"::ffff:10.0.0.1", "FD00::0001", "bad", "10.0.0.1"},
	}}
	if diff := cmp.Diff([]string{"10.0.0.1", "fd00::1", "!bad"}, addressKeys(svc)); diff != "" {
		t.Errorf("addressKeys (-want +got):\n%s", diff)
	}
	keys := []string{"!bad", "fd00::1", "10.0.0.10", "10.0.0.9", "weird"}
	sortKeys(keys)
	if diff := cmp.Diff([]string{"10.0.0.9", "10.0.0.10", "fd00::1", "!bad", "weird"}, keys); diff != "" {
		t.Errorf("sortKeys (-want +got):\n%s", diff)
	}
	headless := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}}}
	if keys := addressKeys(headless); len(keys) != 0 {
		t.Errorf("headless Service keys %q", keys)
	}
}
