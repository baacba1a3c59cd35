package apiserver

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/ptr"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair/report"
)

var created = metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

// createManagedFields is the managedFields entry of a Service created as
// test/scale creates them (selector app=scale, one port 80→8080).
func createManagedFields() []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{
		Manager: "scale", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: ptr.To(created), FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},` +
			`"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},` +
			`"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`),
	}}
}

// scaleService is Service i of test/scale as stored: its create's fields
// with the server's defaults and the managedFields of a create.
func scaleService(i int) *corev1.Service {
	ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("s-%06d", i), Namespace: "scale",
			UID:             "0b6f1c2e-5d4a-4f3b-9c8d-7e6f5a4b3c2d",
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: created,
			ManagedFields: createManagedFields(),
		},
		Spec: corev1.ServiceSpec{
			Selector:              map[string]string{"app": "scale"},
			Ports:                 []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			ClusterIP:             ip,
			ClusterIPs:            []string{ip},
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		},
	}
}

// fullService is a dual-stack LoadBalancer with every field set that a
// stored Service can carry.
func fullService() *corev1.Service {
	deleting := metav1.NewTime(created.Add(time.Hour))
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "3f1d6c0a-8e2b-4b7e-a1c4-5d9e0f2a6b31",
			ResourceVersion: "4711", Generation: 3, CreationTimestamp: created,
			DeletionTimestamp: &deleting, DeletionGracePeriodSeconds: ptr.To[int64](0),
			Labels:          map[string]string{"team": "a", "tier": "web"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Service"}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1"}},
			Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
			ManagedFields:   createManagedFields(),
		},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromString("dns"), NodePort: 30053},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
			},
			ClusterIP:                     "10.96.0.10",
			ClusterIPs:                    []string{"10.96.0.10", "fd00::a"},
			Type:                          corev1.ServiceTypeLoadBalancer,
			ExternalIPs:                   []string{"192.0.2.1"},
			SessionAffinity:               corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			LoadBalancerIP:                "192.0.2.2",
			LoadBalancerSourceRanges:      []string{"192.0.2.0/24"},
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:           30999,
			PublishNotReadyAddresses:      true,
			IPFamilies:                    []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			AllocateLoadBalancerNodePorts: ptr.To(true),
			LoadBalancerClass:             ptr.To("example.com/lb"),
			InternalTrafficPolicy:         ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:           ptr.To("PreferClose"),
		},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.3"}}},
			Conditions:   []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}},
		},
	}
}

// TestSlimService: the slim copy keeps the fields slim.Service's doc lists
// and nothing else, shares no slice with the decoded Service, leaves it
// unchanged, and is its own slim copy.
func TestSlimService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want *corev1.Service
	}{{
		name: "every field set",
		svc:  fullService(),
		want: &corev1.Service{
			TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "3f1d6c0a-8e2b-4b7e-a1c4-5d9e0f2a6b31",
				ResourceVersion: "4711", CreationTimestamp: created, Labels: map[string]string{"team": "a", "tier": "web"}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::a"},
				Ports:               []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, NodePort: 30080}, {Protocol: corev1.ProtocolUDP, NodePort: 30053}},
				HealthCheckNodePort: 30999, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			},
		},
	}, {
		name: "test/scale's Service",
		svc:  scaleService(1),
		want: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s-000001", Namespace: "scale", UID: "0b6f1c2e-5d4a-4f3b-9c8d-7e6f5a4b3c2d",
				ResourceVersion: "100001", CreationTimestamp: created},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"}},
		},
	}, {
		name: "headless",
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"},
				Ports: []corev1.ServicePort{{Port: 53}}}},
		want: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"}}},
	}, {
		name: "ExternalName",
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}},
		want: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
	}, {
		name: "clusterIP alone, clusterIPs empty",
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "ns"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.9", ClusterIPs: []string{}}},
		want: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "ns"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.9"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := tc.svc.DeepCopy()
			got := slim.Service(tc.svc)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("slim.Service (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.svc); diff != "" {
				t.Errorf("slim.Service changed the Service (-before +after):\n%s", diff)
			}
			if len(got.Spec.ClusterIPs) > 0 && &got.Spec.ClusterIPs[0] == &tc.svc.Spec.ClusterIPs[0] {
				t.Error("the slim copy shares the decoded Service's clusterIPs")
			}
			if len(got.Spec.Ports) > 0 && &got.Spec.Ports[0] == &tc.svc.Spec.Ports[0] {
				t.Error("the slim copy shares the decoded Service's ports")
			}
			if diff := cmp.Diff(got, slim.Service(got)); diff != "" {
				t.Errorf("slim.Service of the slim copy (-once +twice):\n%s", diff)
			}
		})
	}
}

// TestInformerTransform: the factory's transform slims a Service, strips an
// IPAddress's managedFields and Service UID annotation (slim.IPAddress: the
// repair patches the one label it mends, so the rest may go), and only the
// managedFields of any other object.
func TestInformerTransform(t *testing.T) {
	t.Parallel()
	svc := fullService()
	got, err := informerTransform(svc.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(slim.Service(svc), got); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}

	ipa := ipaddress.NewObject(netip.MustParseAddr("10.96.0.10"), allocation.Owner{Namespace: "shop", Name: "web", UID: "u1"})
	ipa.ResourceVersion, ipa.UID, ipa.ManagedFields = "7", "i1", createManagedFields()
	ipa.Annotations["example.com/note"] = "kept"
	want := ipa.DeepCopy()
	want.ManagedFields = nil
	want.Annotations = map[string]string{"example.com/note": "kept"}
	got, err = informerTransform(ipa)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("IPAddress (-want +got):\n%s", diff)
	}
	if _, isIPAddress := got.(*networkingv1.IPAddress); !isIPAddress {
		t.Errorf("IPAddress became a %T", got)
	}
}

// serviceReaders are what the readers of the server's Service informer
// make of a cached Service (slim.Service's doc lists them), each by the
// function the reader calls. A new reader of a cached Service adds its
// reads here.
var serviceReaders = []struct {
	name string
	read func(*corev1.Service) any
}{
	{"holding.ClusterIPs: the IPAddress repair's indexes and passes, the bitmap repair, the carry-over", func(s *corev1.Service) any {
		ips, invalid := holding.ClusterIPs(s)
		return fmt.Sprint(ips, invalid)
	}},
	{"holding.NodePorts: the node-port repair", func(s *corev1.Service) any { return holding.NodePorts(s) }},
	{"report.ServiceKey: problems, the repairs' fresh reads", func(s *corev1.Service) any { return report.ServiceKey(s) }},
	{"the informer's key", func(s *corev1.Service) any {
		k, err := cache.MetaNamespaceKeyFunc(s)
		return fmt.Sprint(k, err)
	}},
	{"a lister's namespace", func(s *corev1.Service) any {
		v, err := cache.MetaNamespaceIndexFunc(s)
		return fmt.Sprint(v, err)
	}},
	{"the informer store's resourceVersion (repair.InformerServices)", func(s *corev1.Service) any {
		m, err := meta.Accessor(s)
		if err != nil {
			return err.Error()
		}
		return m.GetResourceVersion()
	}},
	{"an event on the Service", func(s *corev1.Service) any {
		ref, err := reference.GetReference(scheme.Scheme, s)
		if err != nil {
			return err.Error()
		}
		return *ref
	}},
	{"the IPAddress the repair and the carry-over create, UID compared on a fresh read", func(s *corev1.Service) any {
		return ipaddress.NewObject(netip.MustParseAddr("10.0.0.1"), allocation.Owner{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)})
	}},
	{"the IPAddress repair's scope check", func(s *corev1.Service) any {
		var in []bool
		for _, sc := range testScopes {
			in = append(in, sc.Matches(labels.Set{corev1.LabelMetadataName: s.Namespace}, s.Labels))
		}
		return in
	}},
}

// testScopes select Services by label, as scoped ServiceCIDRs do.
var testScopes = func() []*scope.Scope {
	var out []*scope.Scope
	for _, sel := range []string{"team=a", "team=a,tier=web", "tier!=web", "!team"} {
		sc, err := scope.Parse(map[string]string{scope.NamespaceSelectorAnnotation: "", scope.ServiceSelectorAnnotation: sel})
		if err != nil {
			panic(err)
		}
		out = append(out, sc)
	}
	return out
}()

// readerCases are Services that make the readers take each of their
// branches.
func readerCases() map[string]*corev1.Service {
	cases := map[string]*corev1.Service{"full": fullService(), "scale": scaleService(7)}
	with := func(name string, change func(*corev1.Service)) {
		svc := fullService()
		change(svc)
		cases[name] = svc
	}
	with("LoadBalancer Cluster", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	})
	with("NodePort, one port for TCP and UDP", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.Ports[1].NodePort = corev1.ServiceTypeNodePort, 30080
	})
	with("ClusterIP type with nodePorts", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	with("ExternalName with addresses and ports", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName })
	with("type unset", func(s *corev1.Service) { s.Spec.Type = "" })
	with("headless", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} })
	with("clusterIP alone", func(s *corev1.Service) { s.Spec.ClusterIPs = nil })
	with("invalid and mapped", func(s *corev1.Service) {
		s.Spec.ClusterIPs = []string{"::ffff:10.96.0.10", "bad", "", "None", "FD00::0A"}
	})
	with("no labels", func(s *corev1.Service) { s.Labels = nil })
	with("other labels", func(s *corev1.Service) { s.Labels = map[string]string{"tier": "db"} })
	with("older", func(s *corev1.Service) { s.Name, s.CreationTimestamp = "zz", metav1.NewTime(created.Add(-time.Hour)) })
	with("same age, other namespace", func(s *corev1.Service) { s.Namespace = "sho" })
	with("no type meta", func(s *corev1.Service) { s.TypeMeta = metav1.TypeMeta{} })
	return cases
}

// TestSlimServiceKeepsWhatReadersRead: every reader of the Service informer
// answers the same for a Service and for its slim copy, and the repairs
// order the copies as the Services (report.OldestFirst). It fails when
// slim.Service drops a field a reader reads.
func TestSlimServiceKeepsWhatReadersRead(t *testing.T) {
	t.Parallel()
	cases := readerCases()
	for name, svc := range cases {
		kept := slim.Service(svc)
		for _, r := range serviceReaders {
			if diff := cmp.Diff(r.read(svc), r.read(kept)); diff != "" {
				t.Errorf("%s, %s: the slim copy reads differently (-Service +slim):\n%s", name, r.name, diff)
			}
		}
		for other, o := range cases {
			if want, got := report.OldestFirst(svc, o), report.OldestFirst(kept, slim.Service(o)); want != got {
				t.Errorf("OldestFirst(%s, %s) = %d for the slim copies, %d for the Services", name, other, got, want)
			}
		}
	}
}

// BenchmarkSlimServiceBytes reports the heap that n Services shaped like
// test/scale's retain, in B/service, as the informer holds them with each
// transform: each decoded from protobuf on its own, as a watch of etcd
// delivers them (the Services have no watch cache by default).
//
//	go test ./internal/apiserver/ -run '^$' -bench BenchmarkSlimServiceBytes -benchtime 1x -benchmem
func BenchmarkSlimServiceBytes(b *testing.B) {
	benchmarkHeldBytes(b, "B/service", func(i int) ([]byte, error) { return scaleService(i).Marshal() },
		func(data []byte) (any, error) {
			svc := &corev1.Service{}
			return svc, svc.Unmarshal(data)
		},
		[]namedTransform{
			{"decoded", func(obj any) (any, error) { return obj, nil }},
			{"without-managedFields", stripManagedFields},
			{"slim", informerTransform},
		})
}

// namedTransform is a sub-benchmark of benchmarkHeldBytes.
type namedTransform struct {
	name      string
	transform func(any) (any, error)
}

// benchmarkHeldBytes runs a sub-benchmark per transform: it decodes
// 100,000 objects, each from its own bytes (encode(i)) as a watch of etcd
// delivers them, keeps what the transform makes of each, and reports the
// live heap they hold per object, as unit.
func benchmarkHeldBytes(b *testing.B, unit string, encode func(i int) ([]byte, error), decode func([]byte) (any, error), transforms []namedTransform) {
	const n = 100_000
	encoded := make([][]byte, n)
	for i := range encoded {
		data, err := encode(i)
		if err != nil {
			b.Fatal(err)
		}
		encoded[i] = data
	}
	for _, tc := range transforms {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			held := make([]any, n)
			for b.Loop() {
				clear(held)
				before := liveHeap()
				for i, data := range encoded {
					obj, err := decode(data)
					if err != nil {
						b.Fatal(err)
					}
					if held[i], err = tc.transform(obj); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(liveHeap()-before)/n, unit)
			}
			runtime.KeepAlive(held)
		})
	}
	runtime.KeepAlive(encoded)
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
