package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
)

// TestScopeWarning: nothing to say until a ServiceCIDR is scoped; then the
// server's own bitmap model and a live kube-apiserver identity lease are
// named, and an IPAddress-model server alone is not.
func TestScopeWarning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	etcd := srv.Etcd.Client()
	warn := func(self model.Name) string {
		t.Helper()
		w, err := apiserver.ScopeWarning(ctx, srv.Client, etcd, "/registry", self)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := warn(model.Bitmap); w != "" {
		t.Fatalf("nothing scoped, bitmap model: %q", w)
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}}}
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := warn(model.IPAddress); w != "" {
		t.Fatalf("scoped, IPAddress-model server alone: %q", w)
	}
	if w := warn(model.Bitmap); !strings.Contains(w, "ServiceCIDR team-a is scoped, but this server (--allocator=bitmap) allocates ClusterIPs ignoring scopes") {
		t.Fatalf("scoped, bitmap model: %q", w)
	}
	holder, dur := "kas-1_uid", int32(3600)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver-kas-1", Namespace: "kube-system", Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	value, err := etcdlayout.Encode(lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, etcdlayout.Layout{Prefix: "/registry"}.LeasesInNamespacePrefix("kube-system")+lease.Name, string(value)); err != nil {
		t.Fatal(err)
	}
	if w := warn(model.IPAddress); !strings.Contains(w, "but kube-apiserver apiserver-kas-1 allocates ClusterIPs ignoring scopes") {
		t.Fatalf("scoped, a live kube-apiserver: %q", w)
	}
}

// TestKubernetesServiceIgnoresScopes: a scope over every namespace that does
// not fall back would refuse default/kubernetes its address, the first of
// the unscoped default range; the API server's own Service is never scoped,
// so it is re-created there after a delete.
func TestKubernetesServiceIgnoresScopes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress", WithRepair: true})
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "everyone", Annotations: map[string]string{scope.NamespaceSelectorAnnotation: ""}},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.1.0.0/24"}}}
	if _, err := srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another Service in default is in the scope: it may not take the
	// default range's addresses.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.9", Ports: []corev1.ServicePort{{Port: 80}}}}
		_, err := srv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err == nil {
			_ = srv.Client.CoreV1().Services("default").Delete(ctx, "probe", metav1.DeleteOptions{})
			return false, nil // the allocator has not seen the scope yet
		}
		return strings.Contains(err.Error(), "scoped to other Services"), nil
	})
	if err != nil {
		t.Fatalf("a Service of default kept taking the default range's addresses: %v", err)
	}
	if err := srv.Client.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		svc, err := srv.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && svc.Spec.ClusterIP == "10.0.0.1", nil
	})
	if err != nil {
		t.Fatalf("default/kubernetes was not re-created at 10.0.0.1 under a scope over every namespace: %v", err)
	}
}
