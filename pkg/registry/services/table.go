package services

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// tableConvertor prints Services as kubectl does for a kube-apiserver:
// NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE, and SELECTOR with -o wide.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Type", Type: "string", Description: "The type of the Service."},
	{Name: "Cluster-IP", Type: "string", Description: "The cluster IPs of the Service."},
	{Name: "External-IP", Type: "string", Description: "The external IPs or name of the Service."},
	{Name: "Port(s)", Type: "string", Description: "The ports of the Service."},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	{Name: "Selector", Type: "string", Priority: 1, Description: "The label selector of the Service."},
}

func (tableConvertor) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	add := func(svc *corev1.Service) {
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []interface{}{svc.Name, string(svc.Spec.Type), clusterIPs(svc), externalIPs(svc),
				ports(svc), age(svc.CreationTimestamp), selector(svc)},
			Object: runtime.RawExtension{Object: svc},
		})
	}
	switch t := object.(type) {
	case *corev1.Service:
		add(t)
	case *corev1.ServiceList:
		for i := range t.Items {
			add(&t.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T as a Service table", object)
	}
	if l, err := meta.ListAccessor(object); err == nil {
		table.ResourceVersion = l.GetResourceVersion()
		table.Continue = l.GetContinue()
		table.RemainingItemCount = l.GetRemainingItemCount()
	} else if m, err := meta.Accessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	if opts, ok := tableOptions.(*metav1.TableOptions); ok && opts != nil && opts.NoHeaders {
		table.ColumnDefinitions = nil
	}
	return table, nil
}

func clusterIPs(svc *corev1.Service) string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return strings.Join(svc.Spec.ClusterIPs, ",")
	}
	if svc.Spec.ClusterIP != "" {
		return svc.Spec.ClusterIP
	}
	return "<none>"
}

func externalIPs(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	case corev1.ServiceTypeLoadBalancer:
		var ips []string
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				ips = append(ips, ing.IP)
			} else if ing.Hostname != "" {
				ips = append(ips, ing.Hostname)
			}
		}
		ips = append(ips, svc.Spec.ExternalIPs...)
		if len(ips) == 0 {
			return "<pending>"
		}
		return strings.Join(ips, ",")
	}
	if len(svc.Spec.ExternalIPs) > 0 {
		return strings.Join(svc.Spec.ExternalIPs, ",")
	}
	return "<none>"
}

func ports(svc *corev1.Service) string {
	if len(svc.Spec.Ports) == 0 {
		return "<none>"
	}
	parts := make([]string, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			parts = append(parts, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
		} else {
			parts = append(parts, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	return strings.Join(parts, ",")
}

func selector(svc *corev1.Service) string {
	if len(svc.Spec.Selector) == 0 {
		return "<none>"
	}
	return labels.FormatLabels(svc.Spec.Selector)
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(metav1.Now().Sub(t.Time))
}
