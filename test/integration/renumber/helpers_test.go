package renumber_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/app"
	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/internal/testbin"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// buildBinary is the allocator binary, built once per test binary for the
// tests that kill it.
func buildBinary(t *testing.T) string { return testbin.Allocator(t) }

// TestMain applies the commands' logging configuration before any server
// of these tests runs, and removes the built binary at the end.
func TestMain(m *testing.M) {
	if err := testbin.ApplyLogging(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// runCLI runs the allocator command line in-process.
func runCLI(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = app.Run(ctx, args, app.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

// service is a Service of type typ; ips are its clusterIPs ("" entries
// dropped; none: the server picks), families its ipFamilies.
func service(ns, name string, typ corev1.ServiceType, ips []string, families ...corev1.IPFamily) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{"app": name, "tier": "web"},
			Annotations: map[string]string{"example.com/owner": "team-" + ns}},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if len(ips) > 0 {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ips[0], ips
	}
	if len(families) > 0 {
		svc.Spec.IPFamilies = families
		policy := corev1.IPFamilyPolicySingleStack
		if len(families) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
	}
	return svc
}

func createNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createServiceCIDR(ctx context.Context, t *testing.T, c kubernetes.Interface, name string, cidrs ...string) {
	t.Helper()
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	if _, err := c.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// drain annotates ServiceCIDR name draining and waits until the server
// refuses probeIP (inside it) as draining.
func drain(ctx context.Context, t *testing.T, c kubernetes.Interface, name, probeIP string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{lifecycle.DrainingAnnotation: "true"}}})
	if _, err := c.NetworkingV1().ServiceCIDRs().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 10*time.Second, "the server applies the drain of "+name, func() (bool, error) {
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, service(metav1.NamespaceDefault, "probe", corev1.ServiceTypeClusterIP, []string{probeIP}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "draining"), nil
	})
}

// waitServed waits until a dry-run create asking for ip succeeds.
func waitServed(ctx context.Context, t *testing.T, c kubernetes.Interface, ip string) {
	t.Helper()
	poll(ctx, t, 30*time.Second, "the server serves "+ip, func() (bool, error) {
		_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, service(metav1.NamespaceDefault, "probe", corev1.ServiceTypeClusterIP, []string{ip}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
}

func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		t.Fatalf("%s: not within %v: %v", what, timeout, err)
	}
}

// listServices returns every Service by namespace/name.
func listServices(ctx context.Context, t *testing.T, c kubernetes.Interface) map[string]corev1.Service {
	t.Helper()
	list, err := c.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Service{}
	for _, s := range list.Items {
		out[s.Namespace+"/"+s.Name] = s
	}
	return out
}

// checkMoved compares the Services after a renumber with the ones before:
// every one exists again with the same labels, annotations and spec apart
// from its addresses; none holds an address in drained; the addresses
// outside drained are kept; no address is held twice.
func checkMoved(t *testing.T, before, after map[string]corev1.Service, drained netip.Prefix) {
	t.Helper()
	holders := map[netip.Addr]string{}
	for key, svc := range after {
		for _, ip := range holding.IPs(&svc) {
			if other, dup := holders[ip]; dup {
				t.Errorf("%s is held by %s and %s", ip, other, key)
			}
			holders[ip] = key
		}
	}
	for key, old := range before {
		svc, ok := after[key]
		if !ok {
			t.Errorf("%s: lost", key)
			continue
		}
		if !equalMaps(old.Labels, svc.Labels) || !equalMaps(old.Annotations, svc.Annotations) {
			t.Errorf("%s: labels %v annotations %v, had %v %v", key, svc.Labels, svc.Annotations, old.Labels, old.Annotations)
		}
		a, b := old.Spec.DeepCopy(), svc.Spec.DeepCopy()
		a.ClusterIP, a.ClusterIPs, b.ClusterIP, b.ClusterIPs = "", nil, "", nil
		if !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("%s: spec %+v, had %+v", key, *b, *a)
		}
		oldIPs, newIPs := holding.IPs(&old), holding.IPs(&svc)
		if len(oldIPs) != len(newIPs) {
			t.Errorf("%s: clusterIPs %v, had %v", key, newIPs, oldIPs)
			continue
		}
		for i, ip := range newIPs {
			switch {
			case drained.Contains(ip):
				t.Errorf("%s: holds %s, inside the drained %s", key, ip, drained)
			case !drained.Contains(oldIPs[i]) && ip != oldIPs[i]:
				t.Errorf("%s: %s of the family it kept became %s", key, oldIPs[i], ip)
			}
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func itoa(i int) string { return fmt.Sprint(i) }

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// startWithOld starts our server (IPAddress model) on serviceRange with a
// ServiceCIDR "old" (10.1.0.0/24) beside it, served.
func startWithOld(ctx context.Context, t *testing.T, serviceRange string) *testserver.Server {
	t.Helper()
	s := testserver.Start(t, testserver.Options{ServiceRange: serviceRange, Model: "ipaddress"})
	createServiceCIDR(ctx, t, s.Client, "old", "10.1.0.0/24")
	waitServed(ctx, t, s.Client, "10.1.0.200")
	return s
}
