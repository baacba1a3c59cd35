package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// TestWebhookKubeDualStack: on a dual-stack kube-apiserver (IPv4
// primary), the webhook's picks follow the families kube-apiserver
// defaults from ipFamilyPolicy and ipFamilies, and a scoped dual-stack
// ServiceCIDR holds both addresses of a Service it selects, for a create
// and for the updates that need an address (a second family added, an
// ExternalName Service turned ClusterIP).
func TestWebhookKubeDualStack(t *testing.T) {
	k := startKube(t, "10.96.0.0/16,fd00:96::/108")
	ctx := context.Background()
	_, replicas := startWebhookOn(t, k, 2, servicecidrs.Policy{})
	_, err := k.client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.210.0.0/24", "fd00:210::/112"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		for _, p := range []string{"10.210.0.0/24", "fd00:210::/112", "fd00:96::/108"} {
			waitServed(t, r, p)
		}
	}
	mustCreateTeamA(t, k.client)
	single, prefer, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, c := range []struct {
		name      string
		namespace string
		policy    *corev1.IPFamilyPolicy
		families  []corev1.IPFamily
		want      []string // the prefix each ClusterIP must be in, in order
	}{
		{"default-policy", "default", nil, nil, []string{"10.96.0.0/16"}},
		{"single-v6", "default", &single, []corev1.IPFamily{v6}, []string{"fd00:96::/108"}},
		{"prefer", "default", &prefer, nil, []string{"10.96.0.0/16", "fd00:96::/108"}},
		{"require-v6-first", "default", &require, []corev1.IPFamily{v6, v4}, []string{"fd00:96::/108", "10.96.0.0/16"}},
		{"scoped-single", "a", nil, nil, []string{"10.210.0.0/24"}},
		{"scoped-v6", "a", &single, []corev1.IPFamily{v6}, []string{"fd00:210::/112"}},
		{"scoped-prefer", "a", &prefer, nil, []string{"10.210.0.0/24", "fd00:210::/112"}},
		{"scoped-require-v6-first", "a", &require, []corev1.IPFamily{v6, v4}, []string{"fd00:210::/112", "10.210.0.0/24"}},
	} {
		s := service(c.namespace, c.name)
		s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = c.policy, c.families
		got, err := k.client.CoreV1().Services(c.namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		checkIPs(t, c.name, got, c.want)
	}

	// A second family added to a scoped single-stack Service. Not in the
	// second the Service was created: kube-apiserver's own IPAddress repair
	// deletes the new IPAddress as a wrong reference when its Service cache
	// still shows one family, unless the IPAddress is younger than 5 s and
	// created after the Service, by creationTimestamps of whole seconds
	// (docs/design.md, "kube-apiserver's dual-stack upgrade").
	time.Sleep(1100 * time.Millisecond)
	up, err := k.client.CoreV1().Services("a").Get(ctx, "scoped-single", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	up.Spec.IPFamilyPolicy = &prefer
	if up, err = k.client.CoreV1().Services("a").Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a second family added: %v", err)
	}
	checkIPs(t, "second family added", up, []string{"10.210.0.0/24", "fd00:210::/112"})

	// An ExternalName Service turned ClusterIP, dual-stack.
	en := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "external"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	if en, err = k.client.CoreV1().Services("a").Create(ctx, en, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	en.Spec.Type, en.Spec.ExternalName, en.Spec.IPFamilyPolicy = corev1.ServiceTypeClusterIP, "", &require
	en.Spec.Ports = service("a", "external").Spec.Ports
	if en, err = k.client.CoreV1().Services("a").Update(ctx, en, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ExternalName to ClusterIP: %v", err)
	}
	checkIPs(t, "ExternalName to ClusterIP", en, []string{"10.210.0.0/24", "fd00:210::/112"})

	// kube-apiserver stored an IPAddress for each, where the webhook put it.
	var held []string
	waitUntilT(t, 30*time.Second, "the IPAddresses of the scoped Services", func() bool {
		list, err := k.client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		held = held[:0]
		for _, ip := range list.Items {
			if ip.Spec.ParentRef != nil && ip.Spec.ParentRef.Namespace == "a" {
				held = append(held, ip.Spec.ParentRef.Name+"="+ip.Name)
			}
		}
		return len(held) == 2+1+2+2+2 // scoped-single (now dual-stack), -v6, -prefer, -require, external
	}, func() string { return fmt.Sprint(held) })
}

// checkIPs checks that svc's ClusterIPs lie, in order, in the prefixes
// want, and its ipFamilies follow them.
func checkIPs(t *testing.T, what string, svc *corev1.Service, want []string) {
	t.Helper()
	if len(svc.Spec.ClusterIPs) != len(want) {
		t.Errorf("%s: clusterIPs %v, want one in each of %v", what, svc.Spec.ClusterIPs, want)
		return
	}
	var families []corev1.IPFamily
	for i, ip := range svc.Spec.ClusterIPs {
		if !inPrefix(t, ip, want[i]) {
			t.Errorf("%s: clusterIPs %v, want one in each of %v, in order", what, svc.Spec.ClusterIPs, want)
		}
		f := corev1.IPv4Protocol
		if slices.Contains([]byte(ip), ':') {
			f = corev1.IPv6Protocol
		}
		families = append(families, f)
	}
	if !slices.Equal(svc.Spec.IPFamilies, families) || svc.Spec.ClusterIP != svc.Spec.ClusterIPs[0] {
		t.Errorf("%s: clusterIP %s, ipFamilies %v for clusterIPs %v", what, svc.Spec.ClusterIP, svc.Spec.IPFamilies, svc.Spec.ClusterIPs)
	}
}
