package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestJSONStoredService: a Service an older kube-apiserver (or one run with
// --storage-media-type=application/json) stored as JSON is read, served,
// and its address is held: repair gives it its allocation, so the address is
// never handed out again, rather than failing with "object not decodable"
// and getting no IPAddress.
func TestJSONStoredService(t *testing.T) {
	t.Parallel()
	forEachModel(t, func(t *testing.T, model string) {
		ctx := testContext(t)
		etcd := etcdtest.New(t)
		layout := etcdlayout.Layout{Prefix: "/registry"}
		put := func(key string, obj any) {
			t.Helper()
			raw, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := etcd.Client().Put(ctx, key, string(raw)); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
		}
		put(layout.Namespace("legacy"), &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: "legacy", UID: "11111111-1111-4111-8111-111111111111", CreationTimestamp: metav1.Now()},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		})
		single := corev1.IPFamilyPolicySingleStack
		cluster := corev1.ServiceInternalTrafficPolicyCluster
		put(layout.Service("legacy", "web"), &corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "legacy", UID: "22222222-2222-4222-8222-222222222222",
				CreationTimestamp: metav1.Now()},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.50", ClusterIPs: []string{"10.0.0.50"},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &single,
				Ports:           []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}},
				Selector:        map[string]string{"app": "web"},
				SessionAffinity: corev1.ServiceAffinityNone, InternalTrafficPolicy: &cluster,
			},
		})

		srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: model, etcd: etcd})
		got, err := srv.client.CoreV1().Services("legacy").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get the JSON-stored Service: %v", err)
		}
		if got.Spec.ClusterIP != "10.0.0.50" {
			t.Fatalf("clusterIP = %q, want 10.0.0.50", got.Spec.ClusterIP)
		}
		// Its address is held: a Service asking for it is refused once
		// repair has seen the stored one (bounded: the repair's first pass).
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; ; i++ {
			s := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: "legacy"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.50",
					Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
			}
			_, err := srv.client.CoreV1().Services("legacy").Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && apierrors.IsInvalid(err) && strings.Contains(err.Error(), "provided IP is already allocated") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("10.0.0.50 is still free for another Service after 60 s (last answer: %v)", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if model == "ipaddress" {
			ip, err := srv.client.NetworkingV1().IPAddresses().Get(ctx, "10.0.0.50", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("IPAddress of the JSON-stored Service: %v", err)
			}
			if ref := ip.Spec.ParentRef; ref == nil || ref.Namespace != "legacy" || ref.Name != "web" {
				t.Errorf("IPAddress parentRef = %+v, want legacy/web", ref)
			}
		}
	})
}
