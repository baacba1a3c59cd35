package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestStatusDataDirBitmapServer runs the jobs as an operator beside
// `allocator serve --allocator=bitmap` on its embedded etcd: without etcd
// flags, status names the bitmap model (told by the annotation serve sets
// on the ServiceCIDR "kubernetes") and counts the Services' addresses and
// node ports through the API, and renumber refuses; with --data-dir alone,
// status reads the bitmap and the node-port map from the embedded etcd and
// transition status reads etcd, which without it says to pass --data-dir.
func TestStatusDataDirBitmapServer(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--allocator", "bitmap", "--service-cluster-ip-range", "10.0.0.0/24",
		"--service-node-port-range", "30000-30099")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30010}}}}
	if _, err := s.client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if printed := "or, on this machine, with:\n  --data-dir " + s.dataDir + "\n"; !strings.Contains(s.log.String(), printed) {
		t.Errorf("serve did not print %q:\n%s", printed, tail(s.log.String(), 10))
	}
	kube := []string{"--kubeconfig", s.kubeconfig}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // fragments of the output, in order
	}{
		{name: "status without etcd", args: append([]string{"status", "--service-node-port-range", "30000-30099"}, kube...), want: []string{
			"IPv4    10.0.0.0/24  all      254   2     252   0.8%   default=2\n",
			"bitmap model: 1 CIDR, 2 addresses held by Services, counted through the API (no etcd given; --data-dir or --etcd-servers reads the bitmap itself)\n",
			"30000-30099  all      100   1     99    1.0%   default=1\n",
			"node ports: 1 port held by Services, counted through the API against --service-node-port-range",
		}},
		{name: "status with --data-dir", args: append([]string{"status", "--data-dir", s.dataDir}, kube...), want: []string{
			"IPv4    10.0.0.0/24  all      254   2     252   0.8%   default=2\n",
			"bitmap model: 1 CIDR, 2 addresses allocated\n",
			"30000-30099  static   16    1     15    6.2%\n",
			"node ports: 1 port allocated, read from RangeAllocation/servicenodeports in etcd\n",
		}},
		{name: "renumber without etcd", args: append([]string{"renumber", "--from", "kubernetes", "-A"}, kube...), code: 1, want: []string{
			"error: renumber needs the IPAddress model: this cluster allocates ClusterIPs in the bitmap model",
			`the ServiceCIDR "kubernetes" says its server allocates in the bitmap model`,
		}},
		{name: "transition status without etcd", args: []string{"transition", "status"}, code: 1, want: []string{
			"error: no etcd given: pass --data-dir DIR (the --data-dir of an allocator serve running its embedded etcd) or --etcd-servers URL",
		}},
		{name: "transition status with --data-dir", args: []string{"transition", "status", "--data-dir", s.dataDir}, want: []string{"bitmap"}},
		{name: "repair with --data-dir", args: append([]string{"repair", "--dry-run", "--data-dir", s.dataDir}, kube...), want: []string{
			"--model auto: the bitmap model, because bitmap-model replicas are live",
		}},
	} {
		_, output, code := runCLI(t, bin, tc.args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s", tc.name, code, tc.code, output)
			continue
		}
		rest := output
		for _, want := range tc.want {
			i := strings.Index(rest, want)
			if i < 0 {
				t.Errorf("%s: output lacks %q (or has it out of order):\n%s", tc.name, want, output)
				break
			}
			rest = rest[i+len(want):]
		}
	}
}
