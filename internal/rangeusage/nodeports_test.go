package rangeusage

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// nodePortService is a Service of type typ in ns holding ports (and, as a
// LoadBalancer with the Local policy, healthCheck).
func nodePortService(ns, name string, typ corev1.ServiceType, healthCheck int32, ports ...int32) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: typ}}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: 80, NodePort: p})
	}
	if healthCheck != 0 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = healthCheck
	}
	return svc
}

// TestNodePortsFromServices counts the node ports the Services hold
// (holding.NodePorts: every nodePort of a NodePort or LoadBalancer Service,
// the healthCheckNodePort of a Local LoadBalancer, nothing of a ClusterIP
// Service) per band, per namespace, and outside the range.
func TestNodePortsFromServices(t *testing.T) {
	t.Parallel()
	rng := nodeport.MustParse("30000-30999") // static band: 31 ports, 30000-30030
	for _, tc := range []struct {
		name     string
		services []*corev1.Service
		want     *NodePorts
	}{
		{name: "none", want: &NodePorts{Range: rng, Source: SourceServices, Static: Band{Size: 31}, Dynamic: Band{Size: 969}}},
		{name: "bands, namespaces, outside", services: []*corev1.Service{
			nodePortService("web", "a", corev1.ServiceTypeNodePort, 0, 30000, 30030),
			nodePortService("web", "b", corev1.ServiceTypeNodePort, 0, 30031),
			nodePortService("edge", "lb", corev1.ServiceTypeLoadBalancer, 30999, 30500),
			nodePortService("edge", "far", corev1.ServiceTypeNodePort, 0, 31000),
			nodePortService("web", "cluster-ip", corev1.ServiceTypeClusterIP, 0, 30100),
		}, want: &NodePorts{Range: rng, Source: SourceServices,
			Static: Band{Size: 31, Used: 2}, Dynamic: Band{Size: 969, Used: 3}, Outside: 1,
			Namespaces: []NamespaceCount{{Namespace: "web", Used: 3}, {Namespace: "edge", Used: 2}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewClientset()
			for _, svc := range tc.services {
				if _, err := client.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := NodePortsFromServices(context.Background(), client, rng)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(nodeport.Range{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodePortsFromMap reads a node-port map from a real etcd, as
// kube-apiserver writes it, on the range the map records (not the flag's):
// each set bit is a port, owned by the Service holding it or by nobody.
func TestNodePortsFromMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	etcd := etcdtest.New(t).Client()
	const prefix = "/nodeports-test"
	client := fake.NewClientset(nodePortService("web", "a", corev1.ServiceTypeNodePort, 0, 30000, 30500))

	if _, found, err := NodePortsFromMap(ctx, etcd, prefix, client); err != nil || found {
		t.Fatalf("no map stored: found %v, err %v", found, err)
	}

	rng := nodeport.MustParse("30000-30999")
	bits, err := bitset.New(rng.Size(), rng.StaticSize())
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{30000, 30500, 30998} { // 30998: a bit no Service holds (a leak)
		i, _ := rng.Index(port)
		bits.Set(i)
	}
	value, err := etcdlayout.EncodeRangeAllocation(rng.String(), bits.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, etcdlayout.Layout{Prefix: prefix}.ServiceNodePortRange(), string(value)); err != nil {
		t.Fatal(err)
	}
	got, found, err := NodePortsFromMap(ctx, etcd, prefix, client)
	if err != nil || !found {
		t.Fatalf("found %v, err %v", found, err)
	}
	want := &NodePorts{Range: rng, Source: "RangeAllocation/servicenodeports",
		Static: Band{Size: 31, Used: 1}, Dynamic: Band{Size: 969, Used: 2},
		Namespaces: []NamespaceCount{{Namespace: "web", Used: 2}, {Namespace: NoNamespace, Used: 1}}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(nodeport.Range{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestNearlyFull: a range warns from 90% allocated, and when full; an empty
// range never.
func TestNearlyFull(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		band Band
		want bool
	}{
		{Band{Size: 0}, false},
		{Band{Size: 100, Used: 89}, false},
		{Band{Size: 100, Used: 90}, true},
		{Band{Size: 2768, Used: 2768}, true},
		{Band{Size: 1 << 63, Used: 1 << 62}, false},
	} {
		if got := tc.band.NearlyFull(); got != tc.want {
			t.Errorf("%+v: NearlyFull %v, want %v", tc.band, got, tc.want)
		}
	}
}
