package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// kubectl runs the real kubectl against kubeconfig and returns its stdout,
// stderr and exit code.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, string, int) {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), 0
}

// plantUpstreamService writes svc into etcd as kube-apiserver stores it.
func plantUpstreamService(t *testing.T, etcd *etcdtest.Etcd, svc *corev1.Service) {
	t.Helper()
	svc.UID = types.UID(uuid.NewUUID())
	svc.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(context.Background(), etcdlayout.Layout{}.Service(svc.Namespace, svc.Name), string(value)); err != nil {
		t.Fatal(err)
	}
}

// getRows returns `kubectl get svc` rows as fields, by name, without AGE.
func getRows(t *testing.T, kubeconfig string) map[string][]string {
	t.Helper()
	out, errOut, code := kubectl(t, kubeconfig, "get", "svc")
	if code != 0 {
		t.Fatalf("kubectl get svc: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); !cmp.Equal(got, []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}) {
		t.Fatalf("kubectl get svc header: %q", lines[0])
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f[1 : len(f)-1]
	}
	return rows
}

// TestLoadBalancerStatusKubectl: a LoadBalancer and a NodePort Service as
// kube-apiserver stored them are shown by `kubectl get svc` as upstream
// shows them, and `kubectl patch --subresource=status` writes the
// load-balancer status with ipMode, or is refused with upstream's texts.
func TestLoadBalancerStatusKubectl(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	kubeconfig, _ := startServe(t, bin, etcd, "--service-cluster-ip-range", "10.96.0.0/16")

	tcp := corev1.ProtocolTCP
	plantUpstreamService(t, etcd, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.50.50", ClusterIPs: []string{"10.96.50.50"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptrTo(corev1.IPFamilyPolicySingleStack),
			Ports:                         []corev1.ServicePort{{Port: 80, Protocol: tcp, TargetPort: intstr.FromInt32(8080), NodePort: 32140}},
			Selector:                      map[string]string{"app": "lb"},
			SessionAffinity:               corev1.ServiceAffinityNone,
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyCluster,
			InternalTrafficPolicy:         ptrTo(corev1.ServiceInternalTrafficPolicyCluster),
			AllocateLoadBalancerNodePorts: ptrTo(true)},
	})
	plantUpstreamService(t, etcd, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.50.51", ClusterIPs: []string{"10.96.50.51"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptrTo(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "dns-tcp", Port: 53, Protocol: tcp, TargetPort: intstr.FromInt32(53), NodePort: 30053},
				{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53), NodePort: 30053}},
			ExternalIPs:           []string{"198.51.100.7"},
			SessionAffinity:       corev1.ServiceAffinityNone,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			InternalTrafficPolicy: ptrTo(corev1.ServiceInternalTrafficPolicyCluster)},
	})

	rows := getRows(t, kubeconfig)
	want := map[string][]string{
		"lb": {"LoadBalancer", "10.96.50.50", "<pending>", "80:32140/TCP"},
		"np": {"NodePort", "10.96.50.51", "198.51.100.7", "53:30053/TCP,53:30053/UDP"},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, rows[name]); diff != "" {
			t.Errorf("kubectl get svc %s before status (-want +got):\n%s", name, diff)
		}
	}

	out, errOut, code := kubectl(t, kubeconfig, "patch", "svc", "lb", "--subresource=status", "--type=merge",
		"-p", `{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10","ipMode":"Proxy"},{"hostname":"lb.example.com"}]}}}`)
	if code != 0 || !strings.Contains(out, "service/lb patched") {
		t.Fatalf("status patch with ipMode: exit %d\n%s%s", code, out, errOut)
	}
	mode, errOut, code := kubectl(t, kubeconfig, "get", "svc", "lb", "-o", "jsonpath={.status.loadBalancer.ingress[0].ipMode}")
	if code != 0 || mode != "Proxy" {
		t.Errorf("stored ipMode %q (exit %d: %s), want Proxy", mode, code, errOut)
	}

	refused := []struct{ patch, want string }{
		{`{"status":{"loadBalancer":{"ingress":[{"hostname":"x.example.com","ipMode":"Proxy"}]}}}`,
			"status.loadBalancer.ingress[0].ipMode: Forbidden: may not be specified when `ip` is not set"},
		{`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10","ipMode":"Weird"}]}}}`,
			`status.loadBalancer.ingress[0].ipMode: Unsupported value: "Weird": supported values: "Proxy", "VIP"`},
	}
	for _, r := range refused {
		out, errOut, code := kubectl(t, kubeconfig, "patch", "svc", "lb", "--subresource=status", "--type=merge", "-p", r.patch)
		if code == 0 {
			t.Errorf("status patch %s accepted:\n%s", r.patch, out)
			continue
		}
		if want := `The Service "lb" is invalid: ` + r.want; !strings.Contains(errOut, want) {
			t.Errorf("status patch %s: stderr %q, want it to contain %q", r.patch, errOut, want)
		}
	}

	// The refused patches changed nothing; the row shows the ingress.
	rows = getRows(t, kubeconfig)
	if diff := cmp.Diff([]string{"LoadBalancer", "10.96.50.50", "192.0.2.10,lb.example.com", "80:32140/TCP"}, rows["lb"]); diff != "" {
		t.Errorf("kubectl get svc lb after status (-want +got):\n%s", diff)
	}
}

func ptrTo[T any](v T) *T { return &v }
