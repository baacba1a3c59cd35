package invariants

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// service is a stored Service ns/name holding ips and node ports; a port
// given as -p is the health-check node port.
func service(ns, name string, ips []string, ports ...int32) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: ips},
	}
	if len(ips) > 0 {
		svc.Spec.ClusterIP = ips[0]
	}
	for _, p := range ports {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		if p < 0 {
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			svc.Spec.HealthCheckNodePort = -p
			continue
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: 80, NodePort: p, Protocol: corev1.ProtocolTCP})
	}
	return svc
}

func ipAddress(ip, parentNS, parentName string) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Resource: "services", Namespace: parentNS, Name: parentName,
		}},
	}
}

// slots is RangeAllocation data with the given slots set.
func slots(set ...int) []byte {
	top := 0
	for _, s := range set {
		top = max(top, s)
	}
	data := make([]byte, top/8+1)
	for _, s := range set {
		data[len(data)-1-s/8] |= 1 << (s % 8)
	}
	return data
}

// rangeAllocation is a stored map of spec with the given slots set.
type rangeAllocation struct {
	spec  string
	slots []int
}

// state is what a case writes under its own prefix.
type state struct {
	services    []*corev1.Service
	ipAddresses []*networkingv1.IPAddress
	primary     *rangeAllocation
	secondary   *rangeAllocation
	nodePorts   *rangeAllocation
}

func (s state) write(t *testing.T, ctx context.Context, e *etcdtest.Etcd, l etcdlayout.Layout) {
	t.Helper()
	put := func(key string, obj runtime.Object) {
		data, err := etcdlayout.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client().Put(ctx, key, string(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, svc := range s.services {
		put(l.Service(svc.Namespace, svc.Name), svc)
	}
	for _, ipa := range s.ipAddresses {
		put(l.IPAddress(ipa.Name), ipa)
	}
	for key, ra := range map[string]*rangeAllocation{
		l.PrimaryServiceIPRange(): s.primary, l.SecondaryServiceIPRange(): s.secondary, l.ServiceNodePortRange(): s.nodePorts,
	} {
		if ra == nil {
			continue
		}
		var data []byte
		if len(ra.slots) > 0 {
			data = slots(ra.slots...)
		}
		value, err := etcdlayout.EncodeRangeAllocation(ra.spec, data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Client().Put(ctx, key, string(value)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	e := etcdtest.New(t)
	kubernetes := service("default", "kubernetes", []string{"10.0.0.1"})
	kubernetesIPAddress := ipAddress("10.0.0.1", "default", "kubernetes")
	emptyPorts := &rangeAllocation{spec: "30000-30099"}
	mapsKey := func(prefix, name string) string { return prefix + "/ranges/" + name }
	for _, tc := range []struct {
		name  string
		model model.Name
		state state
		// want is the report's findings; %p in a Detail is the case's prefix.
		want Report
	}{{
		name:  "clean ipaddress",
		model: model.IPAddress,
		state: state{
			services: []*corev1.Service{kubernetes, service("ns", "a", []string{"10.0.0.2", "fd00::2"}, 30001, -30002)},
			ipAddresses: []*networkingv1.IPAddress{kubernetesIPAddress,
				ipAddress("10.0.0.2", "ns", "a"), ipAddress("fd00::2", "ns", "a")},
			nodePorts: &rangeAllocation{spec: "30000-30099", slots: []int{1, 2}},
		},
	}, {
		name:  "clean bitmap dual-stack",
		model: model.Bitmap,
		state: state{
			services:  []*corev1.Service{kubernetes, service("ns", "a", []string{"fd00::5", "10.0.0.5"})},
			primary:   &rangeAllocation{spec: "10.0.0.0/24", slots: []int{0, 4}},
			secondary: &rangeAllocation{spec: "fd00::/120", slots: []int{4}},
			nodePorts: emptyPorts,
		},
	}, {
		name:  "duplicate ClusterIP",
		model: model.IPAddress,
		state: state{
			services: []*corev1.Service{kubernetes,
				service("ns", "a", []string{"10.0.0.7"}), service("ns", "b", []string{"10.0.0.7"})},
			ipAddresses: []*networkingv1.IPAddress{kubernetesIPAddress, ipAddress("10.0.0.7", "ns", "a")},
			nodePorts:   emptyPorts,
		},
		want: Report{
			DuplicateIPs: []Shared{{Kind: ClusterIP, Value: "10.0.0.7", Services: []string{"ns/a", "ns/b"}}},
			Unreserved:   []Finding{{Kind: ClusterIP, Value: "10.0.0.7", Service: "ns/b", Reason: OtherParent, Detail: "its IPAddress's parent is ns/a"}},
		},
	}, {
		name:  "duplicate node port, one as health-check port",
		model: model.Bitmap,
		state: state{
			services: []*corev1.Service{kubernetes,
				service("ns", "a", []string{"10.0.0.2"}, 30005), service("ns", "b", []string{"10.0.0.3"}, -30005)},
			primary:   &rangeAllocation{spec: "10.0.0.0/24", slots: []int{0, 1, 2}},
			nodePorts: &rangeAllocation{spec: "30000-30099", slots: []int{5}},
		},
		want: Report{
			DuplicateNodePorts: []Shared{{Kind: NodePort, Value: "30005", Services: []string{"ns/a", "ns/b"}}},
		},
	}, {
		name:  "unreserved",
		model: model.Bitmap,
		state: state{
			services: []*corev1.Service{kubernetes,
				service("ns", "a", []string{"10.0.0.9", "fd00::9"}, 30009), service("ns", "b", []string{"10.1.0.1"})},
			primary:   &rangeAllocation{spec: "10.0.0.0/24", slots: []int{0}},
			secondary: &rangeAllocation{spec: "fd00::/120"},
			nodePorts: emptyPorts,
		},
		want: Report{
			Unreserved: []Finding{
				{Kind: ClusterIP, Value: "10.0.0.9", Service: "ns/a", Reason: BitClear, Detail: "bit clear in " + mapsKey("%p", "serviceips")},
				{Kind: ClusterIP, Value: "10.1.0.1", Service: "ns/b", Reason: NoRecord, Detail: "in no stored ClusterIP map's range"},
				{Kind: ClusterIP, Value: "fd00::9", Service: "ns/a", Reason: BitClear, Detail: "bit clear in " + mapsKey("%p", "secondaryserviceips")},
				{Kind: NodePort, Value: "30009", Service: "ns/a", Reason: BitClear, Detail: "bit clear in " + mapsKey("%p", "servicenodeports")},
			},
		},
	}, {
		name:  "unreserved without maps or IPAddress",
		model: model.IPAddress,
		state: state{services: []*corev1.Service{service("ns", "a", []string{"10.0.0.9"}, 30009)}},
		want: Report{
			Unreserved: []Finding{
				{Kind: ClusterIP, Value: "10.0.0.9", Service: "ns/a", Reason: NoRecord, Detail: "no IPAddress"},
				{Kind: NodePort, Value: "30009", Service: "ns/a", Reason: NoRecord, Detail: "no node-port map stored"},
			},
		},
	}, {
		name:  "unreserved ipaddress",
		model: model.IPAddress,
		state: state{
			services: []*corev1.Service{kubernetes, service("ns", "a", []string{"10.0.0.5"}, 30200)},
			ipAddresses: []*networkingv1.IPAddress{kubernetesIPAddress, {ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.5"}, Spec: networkingv1.IPAddressSpec{
				ParentRef: &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "ns", Name: "a"}}}},
			nodePorts: emptyPorts,
		},
		want: Report{
			Unreserved: []Finding{
				{Kind: ClusterIP, Value: "10.0.0.5", Service: "ns/a", Reason: OtherParent, Detail: "its IPAddress's parent is not a Service"},
				{Kind: NodePort, Value: "30200", Service: "ns/a", Reason: NoRecord, Detail: "outside the node-port map's range 30000-30099"},
			},
		},
	}, {
		name:  "leaks bitmap",
		model: model.Bitmap,
		state: state{
			services:  []*corev1.Service{kubernetes},
			primary:   &rangeAllocation{spec: "10.0.0.0/24", slots: []int{0, 9}},
			nodePorts: &rangeAllocation{spec: "30000-30099", slots: []int{42}},
		},
		want: Report{
			Leaked: []Finding{
				{Kind: ClusterIP, Value: "10.0.0.10", Reason: NoHolder, Detail: "bit set in " + mapsKey("%p", "serviceips")},
				{Kind: NodePort, Value: "30042", Reason: NoHolder, Detail: "bit set in " + mapsKey("%p", "servicenodeports")},
			},
		},
	}, {
		name:  "leaks ipaddress",
		model: model.IPAddress,
		state: state{
			services: []*corev1.Service{kubernetes, service("ns", "a", []string{"10.0.0.2"})},
			ipAddresses: []*networkingv1.IPAddress{kubernetesIPAddress, ipAddress("10.0.0.2", "ns", "a"),
				ipAddress("10.0.0.3", "ns", "a"), ipAddress("10.0.0.4", "ns", "gone"),
				{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.5"}, Spec: networkingv1.IPAddressSpec{
					ParentRef: &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "ns", Name: "g"}}}},
			nodePorts: emptyPorts,
		},
		want: Report{
			Leaked: []Finding{
				{Kind: ClusterIP, Value: "10.0.0.3", Service: "ns/a", Reason: ParentElsewhere, Detail: "IPAddress whose parent Service does not hold it"},
				{Kind: ClusterIP, Value: "10.0.0.4", Service: "ns/gone", Reason: ParentAbsent, Detail: "IPAddress whose parent Service is not stored"},
			},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := "/" + strings.ReplaceAll(tc.name, " ", "-")
			layout := etcdlayout.Layout{Prefix: prefix}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tc.state.write(t, ctx, e, layout)
			got, err := Check(ctx, e.Client(), layout, tc.model)
			if err != nil {
				t.Fatal(err)
			}
			for _, fs := range [][]Finding{tc.want.Unreserved, tc.want.Leaked} {
				for i := range fs {
					fs[i].Detail = strings.ReplaceAll(fs[i].Detail, "%p", prefix)
				}
			}
			if diff := cmp.Diff(tc.want, *got, cmpopts.EquateEmpty(),
				cmpopts.IgnoreFields(Report{}, "Model", "Revision", "Services", "IPAddresses", "Maps")); diff != "" {
				t.Errorf("findings (-want +got):\n%s\nreport:\n%s", diff, got)
			}
			if got.OK() != (len(tc.want.DuplicateIPs)+len(tc.want.DuplicateNodePorts)+len(tc.want.Unreserved) == 0) {
				t.Errorf("OK() = %v for\n%s", got.OK(), got)
			}
			if n := len(got.Services); n != len(tc.state.services) {
				t.Errorf("%d Services read, want %d", n, len(tc.state.services))
			}
		})
	}
}

// TestCheckPages reads more Services than one page holds, all at the
// revision of the first page: a Service written after the first page was
// read is not seen.
func TestCheckPages(t *testing.T) {
	t.Parallel()
	e := etcdtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	layout := etcdlayout.Layout{}
	var services []*corev1.Service
	for i := range pageSize + 5 {
		services = append(services, service("ns", fmt.Sprintf("s-%04d", i), []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}))
	}
	state{services: services}.write(t, ctx, e, layout)
	late, err := etcdlayout.Encode(service("ns", "s-9999", []string{"10.9.9.9"}))
	if err != nil {
		t.Fatal(err)
	}
	kv := &writeAfterFirstGet{KV: e.Client(), key: layout.Service("ns", "s-9999"), value: string(late)}
	got, err := Check(ctx, kv, layout, model.IPAddress)
	if err != nil {
		t.Fatal(err)
	}
	if kv.gets < 2 {
		t.Fatalf("%d reads of etcd, want a page of Services, another, and more", kv.gets)
	}
	if len(got.Services) != len(services) || len(got.Unreserved) != len(services) {
		t.Fatalf("%d Services and %d unreserved addresses, want %d of each", len(got.Services), len(got.Unreserved), len(services))
	}
	if !regexp.MustCompile(`(?m)^unreserved +clusterIP +10\.0\.0\.1 +ns/s-0000 +no IPAddress$`).MatchString(got.String()) {
		t.Errorf("the table does not list ns/s-0000's address:\n%.500s", got.String())
	}
}

// writeAfterFirstGet writes key right after the first Get it serves.
type writeAfterFirstGet struct {
	clientv3.KV
	key, value string
	gets       int
}

func (kv *writeAfterFirstGet) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := kv.KV.Get(ctx, key, opts...)
	kv.gets++
	if kv.gets == 1 {
		if _, err := kv.KV.Put(ctx, kv.key, kv.value); err != nil {
			return nil, err
		}
	}
	return resp, err
}
