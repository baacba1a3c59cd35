package services

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTable(t *testing.T) {
	t.Parallel()
	proxy := corev1.LoadBalancerIPModeProxy
	list := &corev1.ServiceList{Items: []corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: "10.0.0.5", ClusterIPs: []string{"10.0.0.5", "fd00::5"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: "TCP"}, {Port: 53, Protocol: "UDP"}}, Selector: map[string]string{"app": "web"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "extips"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIPs: []string{"10.0.0.6"}, ExternalIPs: []string{"192.0.2.7", "192.0.2.1"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "np"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			ClusterIPs: []string{"10.0.0.7"}, Ports: []corev1.ServicePort{{Port: 53, NodePort: 30053, Protocol: "TCP"}, {Port: 53, NodePort: 30053, Protocol: "UDP"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb-pending"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			ClusterIPs: []string{"10.0.0.8"}, Ports: []corev1.ServicePort{{Port: 80, NodePort: 32140, Protocol: "TCP"}}}},
		// Ingress entries are sorted and deduplicated, a hostname stands for
		// an entry without IP, external IPs follow; nothing is cut short
		// (server-side tables are printed wide).
		{ObjectMeta: metav1.ObjectMeta{Name: "lb"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			ClusterIPs: []string{"10.0.0.9"}, ExternalIPs: []string{"198.51.100.9"}, Ports: []corev1.ServicePort{{Port: 443, Protocol: "TCP"}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "192.0.2.20", IPMode: &proxy}, {Hostname: "lb.example.com"}, {IP: "192.0.2.10"}, {IP: "192.0.2.20", Hostname: "ignored.example.com"},
			}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb-ext-only"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			ClusterIPs: []string{"10.0.0.10"}, ExternalIPs: []string{"198.51.100.10"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}},
	}}
	table, err := tableConvertor.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]interface{}
	for _, row := range table.Rows {
		got = append(got, append(row.Cells[:4:4], row.Cells[4], row.Cells[6]))
	}
	want := [][]interface{}{
		{"web", "ClusterIP", "10.0.0.5", "<none>", "80/TCP,53/UDP", "app=web"},
		{"ext", "ExternalName", "<none>", "example.com", "<none>", "<none>"},
		{"headless", "ClusterIP", "None", "<none>", "<none>", "<none>"},
		{"extips", "ClusterIP", "10.0.0.6", "192.0.2.7,192.0.2.1", "80/TCP", "<none>"},
		{"np", "NodePort", "10.0.0.7", "<none>", "53:30053/TCP,53:30053/UDP", "<none>"},
		{"lb-pending", "LoadBalancer", "10.0.0.8", "<pending>", "80:32140/TCP", "<none>"},
		{"lb", "LoadBalancer", "10.0.0.9", "192.0.2.10,192.0.2.20,lb.example.com,198.51.100.9", "443/TCP", "<none>"},
		{"lb-ext-only", "LoadBalancer", "10.0.0.10", "198.51.100.10", "80/TCP", "<none>"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"}, names); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
}
