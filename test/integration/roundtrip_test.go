package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// fieldsV1 is a managedFields entry's field set, as kube-apiserver records it.
func fieldsV1(manager, subresource string, set string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)}, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(set), Subresource: subresource}
}

// upstreamServices are Services of every type with every field kube-apiserver
// 1.36 sets or accepts, defaults included, as it stores them: based on a
// Service the fixture's kube-apiserver wrote (its metadata shape and
// managedFields), in namespace ns, with cluster IPs from free.
func upstreamServices(template *corev1.Service, ns string, free func() string) []*corev1.Service {
	base := func(name string) *corev1.Service {
		s := template.DeepCopy()
		s.Name, s.Namespace = name, ns
		s.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", len(name)*1000+int(name[0])))
		s.Labels = map[string]string{"app": name}
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Service"}` + "\n"}
		s.Spec.Selector = map[string]string{"app": name}
		ip := free()
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
		s.Status = corev1.ServiceStatus{}
		return s
	}
	vip, proxy := corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy
	cluster, local := corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal

	np := base("np")
	np.Spec.Type = corev1.ServiceTypeNodePort
	np.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	np.Spec.Ports = []corev1.ServicePort{
		{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5353), NodePort: 30053},
		{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns"), NodePort: 30053},
		{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080), NodePort: 31080, AppProtocol: ptrTo("http")},
	}
	np.Spec.ExternalIPs = []string{"198.51.100.20"}
	np.Spec.PublishNotReadyAddresses = true

	lb := base("lb")
	lb.Finalizers = []string{"service.kubernetes.io/load-balancer-cleanup"}
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb.Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443), NodePort: 32140}}
	lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = 32001
	lb.Spec.AllocateLoadBalancerNodePorts = ptrTo(true)
	lb.Spec.LoadBalancerClass = ptrTo("example.com/lb")
	lb.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/64"}
	lb.Spec.LoadBalancerIP = "203.0.113.5"
	lb.Spec.ExternalIPs = []string{"198.51.100.21"}
	lb.Spec.InternalTrafficPolicy = &local
	lb.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	lb.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](600)}}
	lb.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
	lb.Status = corev1.ServiceStatus{
		LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: "203.0.113.5", IPMode: &vip, Ports: []corev1.PortStatus{{Port: 443, Protocol: corev1.ProtocolTCP}}},
			{IP: "2001:db8::5", IPMode: &proxy, Ports: []corev1.PortStatus{{Port: 443, Protocol: corev1.ProtocolTCP, Error: ptrTo("PortUnreachable")}}},
			{Hostname: "lb.example.com"},
		}},
		Conditions: []metav1.Condition{{Type: "LoadBalancerReady", Status: metav1.ConditionTrue, ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 22, 9, 31, 0, 0, time.UTC)), Reason: "Provisioned", Message: "ready"}},
	}
	lb.ManagedFields = append(lb.ManagedFields,
		fieldsV1("service-controller", "", `{"f:metadata":{"f:finalizers":{".":{},"v:\"service.kubernetes.io/load-balancer-cleanup\"":{}}}}`),
		fieldsV1("cloud-controller-manager", "status", `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"LoadBalancerReady\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:loadBalancer":{"f:ingress":{}}}}`))

	// A LoadBalancer whose load balancer is not there yet, without node
	// ports, and an ExternalName Service (no cluster IP, no families, no
	// internal traffic policy: kube-apiserver defaults none of them).
	pending := base("lb-pending")
	pending.Spec.Type = corev1.ServiceTypeLoadBalancer
	pending.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	pending.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	pending.Spec.InternalTrafficPolicy = &cluster

	ext := base("ext")
	ext.Spec.Type = corev1.ServiceTypeExternalName
	ext.Spec.ExternalName = "db.example.com"
	ext.Spec.ClusterIP, ext.Spec.ClusterIPs, ext.Spec.IPFamilies, ext.Spec.IPFamilyPolicy = "", nil, nil, nil
	ext.Spec.InternalTrafficPolicy = nil
	ext.Spec.Selector = nil

	return []*corev1.Service{np, lb, pending, ext}
}

// ignoreServerFields leaves out what any write changes by design: the
// resource version and the managed fields (checked separately).
var ignoreServerFields = cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "ManagedFields")

// managersOf maps manager/operation/subresource to the field set.
func managersOf(s *corev1.Service) map[string]string {
	out := map[string]string{}
	for _, m := range s.ManagedFields {
		out[m.Manager+"/"+string(m.Operation)+"/"+m.Subresource] = m.FieldsV1.GetRawString() // "" when nil
	}
	return out
}

// storedService reads key from etcd and decodes it as kube-apiserver would.
func storedService(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, key string) *corev1.Service {
	t.Helper()
	resp, err := etcd.Client().Get(ctx, key)
	if err != nil {
		t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		return nil
	}
	svc, err := etcdlayout.DecodeService(resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
	return svc
}

// TestKubeAPIServerServicesRoundTrip writes Services of every type exactly
// as kube-apiserver stores them (the fixtures' own, and NodePort,
// LoadBalancer with status and ExternalName ones built on them) into etcd,
// then loads, lists, updates, patches (merge, strategic, JSON), applies
// (server-side) and deletes each through the server with client-go. Every
// step must change only what it asked for, in what is served and in what is
// stored, and keep the managed fields of the other managers (a label
// added to a Service written by kube-apiserver is accepted).
func TestKubeAPIServerServicesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture, model, template string
	}{
		{fixtures.IPAddress136, string(model.IPAddress), "fx/dyn-01"},
		{fixtures.Bitmap132, string(model.Bitmap), "default/dyn-01"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			ctx := testContext(t)
			f := fixtures.Load(t, tc.fixture)
			etcd := etcdtest.New(t)
			if _, err := fixtures.Put(ctx, etcd.Client(), f); err != nil {
				t.Fatal(err)
			}
			layout := etcdlayout.Layout{Prefix: "/registry"}
			ns, tmplName, _ := strings.Cut(tc.template, "/")

			var keys []string
			taken := map[string]bool{}
			for _, kv := range f.KVs {
				if strings.HasPrefix(kv.Key, layout.ServicesPrefix()) && kv.Key != layout.Service("default", "kubernetes") {
					keys = append(keys, kv.Key)
				}
			}
			for _, ips := range f.Expect.Services {
				for _, ip := range ips {
					taken[ip] = true
				}
			}
			next := 100
			free := func() string {
				for {
					ip := fmt.Sprintf("10.96.77.%d", next)
					next++
					if !taken[ip] {
						taken[ip] = true
						return ip
					}
				}
			}
			templateBytes, ok := f.Value(layout.Service(ns, tmplName))
			if !ok {
				t.Fatalf("fixture has no Service %s", tc.template)
			}
			template, err := etcdlayout.DecodeService(templateBytes)
			if err != nil {
				t.Fatal(err)
			}
			for _, svc := range upstreamServices(template, ns, free) {
				value, err := etcdlayout.Encode(svc)
				if err != nil {
					t.Fatal(err)
				}
				key := layout.Service(svc.Namespace, svc.Name)
				if _, err := etcd.Client().Put(ctx, key, string(value)); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, key)
			}
			sort.Strings(keys)

			s := startLBServer(t, tc.model, etcd)
			c := s.Client

			// Load and list: what is served is what kube-apiserver stored.
			written := map[string]*corev1.Service{}
			for _, key := range keys {
				written[key] = storedService(t, ctx, etcd, key)
			}
			listed := map[string]corev1.Service{}
			list, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, item := range list.Items {
				listed[layout.Service(item.Namespace, item.Name)] = item
			}
			for _, key := range keys {
				want := written[key]
				got, err := c.CoreV1().Services(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("get %s: %v", key, err)
				}
				if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"), cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
					t.Errorf("get %s (-stored by kube-apiserver +served):\n%s", key, diff)
				}
				item := listed[key]
				if diff := cmp.Diff(want, &item, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"), cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
					t.Errorf("list %s (-stored by kube-apiserver +listed):\n%s", key, diff)
				}
			}

			for _, key := range keys {
				roundTrip(t, ctx, c, etcd, key, written[key])
			}
		})
	}
}

// roundTrip runs every kind of write on one Service and deletes it.
func roundTrip(t *testing.T, ctx context.Context, c kubernetes.Interface, etcd *etcdtest.Etcd, key string, stored *corev1.Service) {
	t.Helper()
	svcs := c.CoreV1().Services(stored.Namespace)
	name := stored.Name
	want := stored.DeepCopy()
	origManagers := managersOf(stored)

	check := func(step string, got *corev1.Service) {
		t.Helper()
		if diff := cmp.Diff(want, got, ignoreServerFields, cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
			t.Errorf("%s %s (-want +served):\n%s", step, key, diff)
		}
		fromEtcd := storedService(t, ctx, etcd, key)
		if diff := cmp.Diff(got, fromEtcd, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"), cmpopts.IgnoreTypes(metav1.TypeMeta{})); diff != "" {
			t.Errorf("%s %s (-served +stored):\n%s", step, key, diff)
		}
		managers := managersOf(got)
		for m, set := range origManagers {
			if managers[m] != set {
				t.Errorf("%s %s: managed fields of %s changed: %s, want %s", step, key, m, managers[m], set)
			}
		}
	}
	setLabel := func(k, v string) {
		if want.Labels == nil {
			want.Labels = map[string]string{}
		}
		want.Labels[k] = v
	}
	setAnnotation := func(k, v string) {
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[k] = v
	}

	// Update (what kubectl edit and replace do).
	cur, err := svcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels["updated"] = "yes"
	setLabel("updated", "yes")
	got, err := svcs.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update %s: %v", key, err)
	}
	check("update", got)

	got, err = svcs.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"merge":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("merge patch %s: %v", key, err)
	}
	setAnnotation("merge", "yes")
	check("merge patch", got)

	got, err = svcs.Patch(ctx, name, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"strategic":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("strategic patch %s: %v", key, err)
	}
	setLabel("strategic", "yes")
	check("strategic merge patch", got)

	got, err = svcs.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/annotations/json","value":"yes"}]`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("json patch %s: %v", key, err)
	}
	setAnnotation("json", "yes")
	check("json patch", got)

	apply := corev1apply.Service(name, stored.Namespace).WithLabels(map[string]string{"applied": "yes"})
	got, err = svcs.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "roundtrip-test"})
	if err != nil {
		t.Fatalf("server-side apply %s: %v", key, err)
	}
	setLabel("applied", "yes")
	check("server-side apply", got)
	if _, ok := managersOf(got)["roundtrip-test/Apply/"]; !ok {
		t.Errorf("server-side apply %s: no managed fields entry for the applier: %v", key, managersOf(got))
	}

	// A LoadBalancer's status is written by its controller and stays through
	// the spec writes above (checked by check); one more status write.
	if stored.Spec.Type == corev1.ServiceTypeLoadBalancer {
		got, err = svcs.Patch(ctx, name, types.MergePatchType,
			[]byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.9","ipMode":"Proxy"}]}}}`), metav1.PatchOptions{}, "status")
		if err != nil {
			t.Fatalf("status patch %s: %v", key, err)
		}
		want.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9", IPMode: ptrTo(corev1.LoadBalancerIPModeProxy)}}
		// The ingress changes hands, as on kube-apiserver: its previous
		// writer keeps only the conditions.
		for m, set := range origManagers {
			origManagers[m] = strings.Replace(set, `,"f:loadBalancer":{"f:ingress":{}}`, "", 1)
		}
		check("status patch", got)
	}

	// Delete; a finalizer (the service controller's) keeps it until removed.
	if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
	if len(stored.Finalizers) > 0 {
		got, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("delete %s with a finalizer: %v, deletionTimestamp %v", key, err, got.DeletionTimestamp)
		}
		if _, err := svcs.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("remove finalizer of %s: %v", key, err)
		}
	}
	if _, err := svcs.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get %s after delete: %v, want NotFound", key, err)
	}
	if s := storedService(t, ctx, etcd, key); s != nil {
		t.Errorf("%s still in etcd after delete", key)
	}
}
