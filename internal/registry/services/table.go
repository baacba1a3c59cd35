package services

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/allocator/allocator/internal/registry/table"
)

// tableConvertor prints Services as kubectl does for a kube-apiserver:
// NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE, and SELECTOR with -o wide.
var tableConvertor = table.Convertor[*corev1.Service]{Kind: "Service", Columns: columns, Cells: serviceRow}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Type", Type: "string", Description: "The type of the Service."},
	{Name: "Cluster-IP", Type: "string", Description: "The primary cluster IP of the Service."},
	{Name: "External-IP", Type: "string", Description: "The external IPs or name of the Service."},
	{Name: "Port(s)", Type: "string", Description: "The ports of the Service."},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	{Name: "Selector", Type: "string", Priority: 1, Description: "The label selector of the Service."},
}

// serviceRow is a Service's row.
func serviceRow(svc *corev1.Service) []any {
	return []any{svc.Name, string(svc.Spec.Type), clusterIP(svc), externalIP(svc), ports(svc), table.Age(svc.CreationTimestamp), selector(svc)}
}

// clusterIP is the primary cluster IP: upstream's printer shows only
// clusterIPs[0], also for dual-stack Services.
func clusterIP(svc *corev1.Service) string {
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs[0]
	}
	return "<none>"
}

// externalIP is what upstream's printer shows (server-side tables are
// printed wide, so load-balancer addresses are never cut short): external
// IPs for ClusterIP and NodePort; for LoadBalancer the ingress IPs (or
// hostnames, for entries without IP), sorted and deduplicated, then the
// external IPs, or <pending> while there are none; the external name for
// ExternalName.
func externalIP(svc *corev1.Service) string {
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		if len(svc.Spec.ExternalIPs) > 0 {
			return strings.Join(svc.Spec.ExternalIPs, ",")
		}
		return "<none>"
	case corev1.ServiceTypeLoadBalancer:
		ingress := sets.New[string]()
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				ingress.Insert(ing.IP)
			} else if ing.Hostname != "" {
				ingress.Insert(ing.Hostname)
			}
		}
		all := append(sets.List(ingress), svc.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return svc.Spec.ExternalName
	}
	return "<unknown>"
}

// ports lists port/protocol, with the node port as port:nodePort/protocol.
func ports(svc *corev1.Service) string {
	if len(svc.Spec.Ports) == 0 {
		return "<none>"
	}
	parts := make([]string, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		if p.NodePort > 0 {
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
