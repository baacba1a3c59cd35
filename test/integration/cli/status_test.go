package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/allocator/allocator/internal/testserver"
)

// fillStatusRange creates, on 10.0.0.0/24 (static band .1–.16, dynamic
// .17–.254), Services with a known spread: in the static band the
// "kubernetes" Service (.1), default/fixed (.5) and team-a/edge (.16, the
// band's last address); in the dynamic band team-a/first-dynamic (.17, the
// band's first address), team-b/high (.200) and three dynamic team-a
// Services (dynamic allocation takes the upper band while it has room).
// Static 3 of 16, dynamic 5 of 238; team-a 5, default 2, team-b 1.
func fillStatusRange(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(ns, name, ip string) {
		t.Helper()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
			ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s %s: %v", ns, name, ip, err)
		}
	}
	create("default", "fixed", "10.0.0.5")
	create("team-a", "edge", "10.0.0.16")
	create("team-a", "first-dynamic", "10.0.0.17")
	create("team-b", "high", "10.0.0.200")
	for _, name := range []string{"d1", "d2", "d3"} {
		create("team-a", name, "")
	}
}

const wantStatusTable = `FAMILY  CIDR         BAND     SIZE  USED  FREE  USED%  TOP NAMESPACES
IPv4    10.0.0.0/24  static   16    3     13    18.8%
IPv4    10.0.0.0/24  dynamic  238   5     233   2.1%
IPv4    10.0.0.0/24  all      254   8     246   3.1%   team-a=5 default=2 (+1 more)
`

// wantNodePortsTable is the node-port table of a server on the default
// --service-node-port-range holding none, and the line naming its source.
func wantNodePortsTable(summary string) string {
	return `
NODE PORTS   BAND     SIZE  USED  FREE  USED%  TOP NAMESPACES
30000-32767  static   86    0     86    0.0%
30000-32767  dynamic  2682  0     2682  0.0%
30000-32767  all      2768  0     2768  0.0%
node ports: ` + summary + "\n"
}

// wantStatusJSON is the JSON of the fill above; source names the object
// the range comes from in each model, portSource the node ports'.
func wantStatusJSON(model, source, portSource string) string {
	return `{
  "model": "` + model + `",
  "families": [
    {
      "family": "IPv4",
      "size": 254,
      "used": 8,
      "free": 246,
      "percent": 3.15,
      "outside": 0
    }
  ],
  "cidrs": [
    {
      "family": "IPv4",
      "cidr": "10.0.0.0/24",
      "source": "` + source + `",
      "ready": true,
      "first": "10.0.0.1",
      "last": "10.0.0.254",
      "size": 254,
      "used": 8,
      "free": 246,
      "percent": 3.15,
      "static": {
        "size": 16,
        "used": 3,
        "free": 13,
        "percent": 18.75
      },
      "dynamic": {
        "size": 238,
        "used": 5,
        "free": 233,
        "percent": 2.1
      },
      "namespaces": [
        {
          "namespace": "team-a",
          "used": 5
        },
        {
          "namespace": "default",
          "used": 2
        },
        {
          "namespace": "team-b",
          "used": 1
        }
      ]
    }
  ],
  "nodePorts": {
    "range": "30000-32767",
    "source": "` + portSource + `",
    "size": 2768,
    "used": 0,
    "free": 2768,
    "percent": 0,
    "static": {
      "size": 86,
      "used": 0,
      "free": 86,
      "percent": 0
    },
    "dynamic": {
      "size": 2682,
      "used": 0,
      "free": 2682,
      "percent": 0
    },
    "outside": 0,
    "namespaces": []
  }
}
`
}

// TestStatusKnownFill runs `allocator status` against the real server in
// each model on a /24 with a known fill, and checks every figure per band,
// in table and JSON form.
func TestStatusKnownFill(t *testing.T) {
	for _, tt := range []struct {
		model, source, portSource, portSummary string
		etcdFlags                              bool
	}{
		{model: "ipaddress", source: "ServiceCIDR/kubernetes", portSource: "Services",
			portSummary: "0 ports held by Services, counted through the API against --service-node-port-range (no etcd given; --data-dir or --etcd-servers reads the map itself)"},
		{model: "bitmap", source: "RangeAllocation/serviceips", etcdFlags: true, portSource: "RangeAllocation/servicenodeports",
			portSummary: "0 ports allocated, read from RangeAllocation/servicenodeports in etcd"},
	} {
		t.Run(tt.model, func(t *testing.T) {
			srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: tt.model})
			fillStatusRange(t, srv.Client)
			args := []string{"status", "--kubeconfig", srv.KubeconfigPath}
			if tt.etcdFlags {
				// auto picks the bitmap model: a bitmap-model replica (the
				// server) is live.
				args = append(args, "--etcd-servers", strings.Join(srv.Etcd.Endpoints(), ","))
			}
			out, errOut, code := runApp(t, append(args, "--top", "2")...)
			if code != 0 {
				t.Fatalf("status: exit %d\n%s", code, errOut)
			}
			want := wantStatusTable + tt.model + " model: 1 CIDR, 8 addresses allocated\n" + wantNodePortsTable(tt.portSummary)
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			out, errOut, code = runApp(t, append(args, "-o", "json")...)
			if code != 0 {
				t.Fatalf("status -o json: exit %d\n%s", code, errOut)
			}
			if diff := cmp.Diff(wantStatusJSON(tt.model, tt.source, tt.portSource), out); diff != "" {
				t.Errorf("json (-want +got):\n%s", diff)
			}
			// yaml and jsonpath are the same document, as kubectl's -o spells them.
			out, errOut, code = runApp(t, append(args, "-o", "yaml")...)
			if want, err := yaml.JSONToYAML([]byte(wantStatusJSON(tt.model, tt.source, tt.portSource))); code != 0 || err != nil || out != string(want) {
				t.Errorf("status -o yaml: exit %d (%v), got\n%s%s\nwant\n%s", code, err, out, errOut, want)
			}
			out, errOut, code = runApp(t, append(args, "-o", "jsonpath={.cidrs[0].cidr}")...)
			if code != 0 || out != "10.0.0.0/24\n" {
				t.Errorf("status -o jsonpath: exit %d, got %q%s", code, out, errOut)
			}
			// -n narrows the namespaces, not the totals.
			out, errOut, code = runApp(t, append(args, "-n", "team-b")...)
			wantRow := "IPv4    10.0.0.0/24  all      254   8     246   3.1%   team-b=1\n"
			if code != 0 || !strings.Contains(out, wantRow) {
				t.Errorf("status -n team-b: exit %d, want row\n%s\ngot\n%s%s", code, wantRow, out, errOut)
			}
			out, errOut, code = runApp(t, append(args, "-o", "wide", "--top", "5")...)
			wantRow = "IPv4    10.0.0.0/24  " + tt.source + "  true   10.0.0.1  10.0.0.254  all      254   8     246   3.1%   team-a=5 default=2 team-b=1"
			if code != 0 || !strings.Contains(out, wantRow+"\n") {
				t.Errorf("status -o wide: exit %d, want row\n%s\ngot\n%s%s", code, wantRow, out, errOut)
			}
		})
	}
}

// TestStatusDualStackSlash64: a dual-stack server with an IPv6 /64 answers
// at once with the exact size of the /64 (2^64−1 usable addresses): counts
// come from the IPAddresses, the range is never iterated.
func TestStatusDualStackSlash64(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24,fd00::/64", Model: "ipaddress"})
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: "default"}, Spec: corev1.ServiceSpec{
		IPFamilyPolicy: &policy, ClusterIP: "10.0.0.20", ClusterIPs: []string{"10.0.0.20", "fd00::5"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	if _, err := srv.Client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runApp(t, "status", "--kubeconfig", srv.KubeconfigPath)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, errOut)
	}
	want := `FAMILY  CIDR         BAND     SIZE                  USED  FREE                  USED%  TOP NAMESPACES
IPv4    10.0.0.0/24  static   16                    1     15                    6.2%
IPv4    10.0.0.0/24  dynamic  238                   1     237                   0.4%
IPv4    10.0.0.0/24  all      254                   2     252                   0.8%   default=2
IPv6    fd00::/64    static   256                   1     255                   0.4%
IPv6    fd00::/64    dynamic  18446744073709551359  0     18446744073709551359  0.0%
IPv6    fd00::/64    all      18446744073709551615  1     18446744073709551614  <0.1%  default=1
ipaddress model: 2 CIDRs, 3 addresses allocated
` + wantNodePortsTable("0 ports held by Services, counted through the API against --service-node-port-range "+
		"(no etcd given; --data-dir or --etcd-servers reads the map itself)")
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
