package services

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTable(t *testing.T) {
	list := &corev1.ServiceList{Items: []corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: "10.0.0.5", ClusterIPs: []string{"10.0.0.5", "fd00::5"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: "TCP"}, {Port: 53, Protocol: "UDP"}}, Selector: map[string]string{"app": "web"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"}}},
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
		{"web", "ClusterIP", "10.0.0.5,fd00::5", "<none>", "80/TCP,53/UDP", "app=web"},
		{"ext", "ExternalName", "<none>", "example.com", "<none>", "<none>"},
		{"headless", "ClusterIP", "None", "<none>", "<none>", "<none>"},
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
