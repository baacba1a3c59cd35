package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/apiserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/scope"
)

// TestScopeWarning: nothing to say until a ServiceCIDR is scoped; then the
// server's own bitmap model and a live kube-apiserver identity lease are
// named, and an IPAddress-model server alone is not.
func TestScopeWarning(t *testing.T) {
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
