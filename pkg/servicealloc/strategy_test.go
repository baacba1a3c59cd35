package servicealloc

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// TestStrategies: a spec write never writes status (a Service that stops
// being a LoadBalancer loses its load-balancer status), a status write never
// writes the spec, and the reset fields say the same to server-side apply.
func TestStrategies(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	main, status := NewStrategies(scheme)
	lbStatus := corev1.ServiceStatus{
		LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}},
		Conditions:   []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}},
	}
	svc := func(typ corev1.ServiceType, clusterIP string, st corev1.ServiceStatus) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec:       corev1.ServiceSpec{Type: typ, ClusterIP: clusterIP},
			Status:     st,
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prepare func(obj, old *corev1.Service)
		obj     *corev1.Service
		old     *corev1.Service // nil for a create
		want    *corev1.Service
	}{{
		name:    "create drops status",
		prepare: func(obj, _ *corev1.Service) { main.PrepareForCreate(ctx, obj) },
		obj:     svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", lbStatus),
		want:    svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", corev1.ServiceStatus{}),
	}, {
		name:    "spec update keeps the stored status",
		prepare: func(obj, old *corev1.Service) { main.PrepareForUpdate(ctx, obj, old) },
		obj:     svc(corev1.ServiceTypeLoadBalancer, "10.0.0.2", corev1.ServiceStatus{}),
		old:     svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", lbStatus),
		want:    svc(corev1.ServiceTypeLoadBalancer, "10.0.0.2", lbStatus),
	}, {
		name:    "spec update away from LoadBalancer drops the load-balancer status only",
		prepare: func(obj, old *corev1.Service) { main.PrepareForUpdate(ctx, obj, old) },
		obj:     svc(corev1.ServiceTypeClusterIP, "10.0.0.1", corev1.ServiceStatus{}),
		old:     svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", lbStatus),
		want:    svc(corev1.ServiceTypeClusterIP, "10.0.0.1", corev1.ServiceStatus{Conditions: lbStatus.Conditions}),
	}, {
		name:    "status update keeps the stored spec",
		prepare: func(obj, old *corev1.Service) { status.PrepareForUpdate(ctx, obj, old) },
		obj:     svc(corev1.ServiceTypeClusterIP, "10.0.0.9", lbStatus),
		old:     svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", corev1.ServiceStatus{}),
		want:    svc(corev1.ServiceTypeLoadBalancer, "10.0.0.1", lbStatus),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var old *corev1.Service
			if tc.old != nil {
				old = tc.old.DeepCopy()
			}
			obj := tc.obj.DeepCopy()
			tc.prepare(obj, old)
			if diff := cmp.Diff(tc.want, obj); diff != "" {
				t.Errorf("prepared Service (-want +got):\n%s", diff)
			}
			if old != nil {
				if diff := cmp.Diff(tc.old, old); diff != "" {
					t.Errorf("the stored Service changed (-want +got):\n%s", diff)
				}
				// The result shares no memory with the stored Service.
				if len(old.Status.LoadBalancer.Ingress) > 0 {
					old.Status.LoadBalancer.Ingress[0].IP = "198.51.100.1"
				}
				if diff := cmp.Diff(tc.want, obj); diff != "" {
					t.Errorf("prepared Service shares memory with the stored one (-want +got):\n%s", diff)
				}
			}
		})
	}

	for _, tc := range []struct {
		name string
		got  map[fieldpath.APIVersion]*fieldpath.Set
		want string
	}{
		{"spec writes reset status", main.GetResetFields(), ".status"},
		{"status writes reset spec", status.GetResetFields(), ".spec"},
	} {
		set := tc.got["v1"]
		if len(tc.got) != 1 || set == nil || set.String() != tc.want {
			t.Errorf("%s: reset fields %v, want v1 %s", tc.name, tc.got, tc.want)
		}
	}
	if !main.NamespaceScoped() || !main.AllowCreateOnUpdate(ctx) || !main.AllowUnconditionalUpdate(ctx) {
		t.Errorf("NamespaceScoped, AllowCreateOnUpdate, AllowUnconditionalUpdate = %v, %v, %v, want all true",
			main.NamespaceScoped(), main.AllowCreateOnUpdate(ctx), main.AllowUnconditionalUpdate(ctx))
	}
	if errs := main.Validate(ctx, svc(corev1.ServiceTypeClusterIP, "not an IP", corev1.ServiceStatus{})); len(errs) == 0 {
		t.Errorf("Validate accepted clusterIP %q", "not an IP")
	}
}
