package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/testserver"
)

// fillNodePorts holds 9 of the 10 ports of 30000-30009 (no static band at
// that size): team-a/np two (30005 chosen, one picked), team-a/many five,
// team-b/lb a LoadBalancer with the Local policy, its node port and its
// health-check port.
func fillNodePorts(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(ns, name string, typ corev1.ServiceType, nodePorts ...int32) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{Type: typ}}
		for i, p := range nodePorts {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: string(rune('a' + i)), Port: int32(80 + i), TargetPort: intstr.FromInt32(80), NodePort: p})
		}
		if typ == corev1.ServiceTypeLoadBalancer {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", ns, name, err)
		}
	}
	create("team-a", "np", corev1.ServiceTypeNodePort, 30005, 0)
	create("team-a", "many", corev1.ServiceTypeNodePort, 0, 0, 0, 0, 0)
	create("team-b", "lb", corev1.ServiceTypeLoadBalancer, 0)
}

// TestStatusNodePorts runs `allocator status` against the real server, in
// each model and with and without etcd, on a node-port range 90% allocated:
// the node-port rows, their source, the warning, in table and JSON form. A
// bitmap-model server reached without etcd is recognised through the API
// (the annotation it sets on the ServiceCIDR "kubernetes"): status says
// the bitmap model and counts the Services' addresses, renumber refuses,
// and repair asks for etcd.
func TestStatusNodePorts(t *testing.T) {
	const warning = "node ports 30000-30009 are 90.0% allocated (1 free): a NodePort or LoadBalancer Service that asks for no " +
		"particular port fails with \"range is full\" when none is free; delete the Services that no longer need node ports, " +
		"or widen --service-node-port-range on every server"
	for _, tt := range []struct {
		name, model, source, countedFrom string
		etcdFlags                        bool
		summary                          string
	}{
		{name: "ipaddress", model: "ipaddress", source: "Services",
			summary: "ipaddress model: 1 CIDR, 4 addresses allocated\n"},
		{name: "bitmap with etcd", model: "bitmap", source: "RangeAllocation/servicenodeports", etcdFlags: true,
			summary: "bitmap model: 1 CIDR, 4 addresses allocated\n"},
		{name: "bitmap without etcd", model: "bitmap", source: "Services", countedFrom: "Services",
			summary: "bitmap model: 1 CIDR, 4 addresses held by Services, counted through the API (no etcd given; --data-dir or --etcd-servers reads the bitmap itself)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: tt.model,
				Flags: func(o *apiserver.Options) { o.ServiceNodePortRange = "30000-30009" }})
			fillNodePorts(t, srv.Client)
			args := []string{"status", "--kubeconfig", srv.KubeconfigPath}
			if tt.etcdFlags {
				args = append(args, "--etcd-servers", strings.Join(srv.Etcd.Endpoints(), ","))
			} else {
				args = append(args, "--service-node-port-range", "30000-30009")
			}
			out, errOut, code := runApp(t, args...)
			if code != 0 {
				t.Fatalf("status: exit %d\n%s", code, errOut)
			}
			portsSummary := "node ports: 9 ports allocated, read from RangeAllocation/servicenodeports in etcd\n"
			if tt.source == "Services" {
				portsSummary = "node ports: 9 ports held by Services, counted through the API against --service-node-port-range " +
					"(no etcd given; --data-dir or --etcd-servers reads the map itself)\n"
			}
			want := tt.summary + `
NODE PORTS   BAND     SIZE  USED  FREE  USED%  TOP NAMESPACES
30000-30009  static   0     0     0     0.0%
30000-30009  dynamic  10    9     1     90.0%
30000-30009  all      10    9     1     90.0%  team-a=7 team-b=2
` + portsSummary + "WARNING: " + warning + "\n"
			if !strings.HasSuffix(out, want) {
				t.Errorf("the table's end (-want +got):\n%s", cmp.Diff(want, out[max(0, len(out)-len(want)):]))
			}
			out, errOut, code = runApp(t, append(args, "-o", "json", "-n", "team-b")...)
			if code != 0 {
				t.Fatalf("status -o json: exit %d\n%s", code, errOut)
			}
			var doc struct {
				Model       string
				CountedFrom string
				NodePorts   struct {
					Range, Source, Warning string
					Used, Free             uint64
					Namespaces             []struct {
						Namespace string
						Used      uint64
					}
				}
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			np := doc.NodePorts
			if doc.Model != tt.model || doc.CountedFrom != tt.countedFrom || np.Range != "30000-30009" || np.Source != tt.source ||
				np.Used != 9 || np.Free != 1 || np.Warning != warning || len(np.Namespaces) != 1 || np.Namespaces[0].Used != 2 {
				t.Errorf("status -o json -n team-b: %s", out)
			}
			if tt.etcdFlags || tt.model != "bitmap" {
				return
			}
			_, errOut, code = runApp(t, "renumber", "--kubeconfig", srv.KubeconfigPath, "--from", "kubernetes", "-A")
			if code != 1 || !strings.Contains(errOut, "renumber needs the IPAddress model") || !strings.Contains(errOut, "annotation allocator.github.io/allocator-model") {
				t.Errorf("renumber against a bitmap-model server without etcd: exit %d, %s", code, errOut)
			}
			_, errOut, code = runApp(t, "repair", "--kubeconfig", srv.KubeconfigPath, "--dry-run")
			if code != 1 || !strings.Contains(errOut, "the bitmap model needs etcd") || !strings.Contains(errOut, "--data-dir DIR") {
				t.Errorf("repair against a bitmap-model server without etcd: exit %d, %s", code, errOut)
			}
		})
	}
}

// TestStatusModelThroughAPI: each server annotates the ServiceCIDR
// "kubernetes" with its model at start, so status without etcd names the
// model of the server that started last on the cluster's etcd.
func TestStatusModelThroughAPI(t *testing.T) {
	etcd := etcdtest.New(t)
	for _, m := range []string{"bitmap", "ipaddress", "bitmap"} {
		srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: m, Etcd: etcd})
		sc, err := srv.Client.NetworkingV1().ServiceCIDRs().Get(context.Background(), "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := sc.Annotations[ipallocator.AnnotationModel]; got != m {
			t.Errorf("a %s-model server started: annotation %q", m, got)
		}
		out, errOut, code := runApp(t, "status", "--kubeconfig", srv.KubeconfigPath)
		if code != 0 || !strings.Contains(out, "\n"+m+" model: 1 CIDR") {
			t.Errorf("status beside a %s-model server: exit %d\n%s%s", m, code, out, errOut)
		}
		srv.Stop()
	}
}
