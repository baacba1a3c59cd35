package ipaddress

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/pkg/allocation"
)

// TestOwnedBy: the parentRef decides, and the recorded Service UID too when
// both the object and the owner carry one; an object kube-apiserver wrote
// (no UID) or an owner whose UID is unknown is judged by namespace and name.
func TestOwnedBy(t *testing.T) {
	t.Parallel()
	ip := netip.MustParseAddr("10.0.0.7")
	web := func(uid string) allocation.Owner {
		return allocation.Owner{Namespace: "default", Name: "web", UID: uid}
	}
	tests := []struct {
		name  string
		obj   allocation.Owner // the owner the object was created for
		owner allocation.Owner
		want  bool
	}{
		{"same UID", web("u1"), web("u1"), true},
		{"newer Service of the same name", web("u1"), web("u2"), false},
		{"object without UID (kube-apiserver's)", web(""), web("u2"), true},
		{"owner without UID", web("u1"), web(""), true},
		{"other name", web("u1"), allocation.Owner{Namespace: "default", Name: "db", UID: "u1"}, false},
		{"other namespace", web(""), allocation.Owner{Namespace: "prod", Name: "web"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obj := NewObject(ip, tt.obj)
			if got := obj.Annotations[AnnotationServiceUID]; got != tt.obj.UID {
				t.Errorf("NewObject recorded UID %q, want %q", got, tt.obj.UID)
			}
			if got := OwnedBy(obj, tt.owner); got != tt.want {
				t.Errorf("OwnedBy = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParentIsService: only a parentRef to a core Service (group "",
// resource services) is a Service's; another group or resource, or none,
// is not, and OwnedBy is false for it whatever its namespace and name.
func TestParentIsService(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		parent *networkingv1.ParentReference
		want   bool
	}{
		{"core Service", &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}, true},
		{"no parent", nil, false},
		{"other group", &networkingv1.ParentReference{Group: "example.com", Resource: "services", Namespace: "default", Name: "web"}, false},
		{"other resource", &networkingv1.ParentReference{Resource: "pods", Namespace: "default", Name: "web"}, false},
		{"Gateway", &networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default", Name: "web"}, false},
		{"singular resource", &networkingv1.ParentReference{Resource: "service", Namespace: "default", Name: "web"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obj := NewObject(netip.MustParseAddr("10.0.0.7"), allocation.Owner{Namespace: "default", Name: "web"})
			obj.Spec.ParentRef = tt.parent
			if got := ParentIsService(obj); got != tt.want {
				t.Errorf("ParentIsService = %v, want %v", got, tt.want)
			}
			if got := OwnedBy(obj, allocation.Owner{Namespace: "default", Name: "web"}); got != tt.want {
				t.Errorf("OwnedBy = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		parent *networkingv1.ParentReference
		want   string
	}{
		{&networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}, "default/web"},
		{nil, "no parent"},
		{&networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default", Name: "gw"},
			"gateway.networking.k8s.io/gateways/default/gw"},
		{&networkingv1.ParentReference{Resource: "pods", Namespace: "default", Name: "web"}, "/pods/default/web"},
	} {
		obj := NewObject(netip.MustParseAddr("10.0.0.7"), allocation.Owner{})
		obj.Spec.ParentRef = tt.parent
		if got := Parent(obj); got != tt.want {
			t.Errorf("Parent(%+v) = %q, want %q", tt.parent, got, tt.want)
		}
	}
}

// TestDeleteOwnedComparesUID: a release for a deleted Service "web" never
// deletes the IPAddress a newer "web" (another UID) holds; the newer one's
// own release does.
func TestDeleteOwnedComparesUID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.7")
	api := fake.NewClientset().NetworkingV1().IPAddresses()
	newer := allocation.Owner{Namespace: "default", Name: "web", UID: "u2"}
	if _, err := api.Create(ctx, NewObject(ip, newer), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	older := allocation.Owner{Namespace: "default", Name: "web", UID: "u1"}
	if got, err := DeleteOwned(ctx, api, nil, ip, older); err != nil || got != OtherOwner {
		t.Fatalf("release for the older Service: %v, %v; want OtherOwner", got, err)
	}
	if _, err := api.Get(ctx, ip.String(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the newer Service's IPAddress is gone: %v", err)
	}
	if got, err := DeleteOwned(ctx, api, nil, ip, newer); err != nil || got != Released {
		t.Fatalf("release for the newer Service: %v, %v; want Released", got, err)
	}
	if _, err := api.Get(ctx, ip.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after its owner's release the IPAddress is still there: %v", err)
	}
}

// TestDeleteOwnedTellsStaleFromHeld: an IPAddress naming another Service
// is kept either way; the release reports whether that Service holds the
// address now (OtherOwner) or not (NotHeld: the repair created it for a
// Service deleted meanwhile, an earlier Service of the same name say), read
// through services. A failed read is a retriable error, never a guess.
func TestDeleteOwnedTellsStaleFromHeld(t *testing.T) {
	t.Parallel()
	ip := netip.MustParseAddr("10.0.0.7")
	other := netip.MustParseAddr("10.0.0.8")
	earlier := allocation.Owner{Namespace: "default", Name: "c", UID: "u1"} // the IPAddress names it
	releasing := allocation.Owner{Namespace: "default", Name: "c", UID: "u2"}
	service := func(ips ...netip.Addr) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "u3"}}
		for _, a := range ips {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, a.String())
		}
		if len(ips) > 0 {
			svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		}
		return svc
	}
	reads := func(svc *corev1.Service, err error) Services {
		return func(context.Context, string, string) (*corev1.Service, error) { return svc, err }
	}
	gateway := NewObject(ip, earlier)
	gateway.Spec.ParentRef.Group, gateway.Spec.ParentRef.Resource = "gateway.networking.k8s.io", "gateways"
	tests := []struct {
		name      string
		obj       *networkingv1.IPAddress
		services  Services
		want      ReleaseOutcome
		retriable bool
	}{
		{"its Service is gone", NewObject(ip, earlier), reads(nil, nil), NotHeld, false},
		{"its Service holds other addresses", NewObject(ip, earlier), reads(service(other), nil), NotHeld, false},
		{"its Service holds the address", NewObject(ip, earlier), reads(service(other, ip), nil), OtherOwner, false},
		{"a parent that is no Service", gateway, reads(nil, nil), OtherOwner, false},
		{"no Services to ask", NewObject(ip, earlier), nil, OtherOwner, false},
		{"the read fails", NewObject(ip, earlier), reads(nil, errors.New("etcd unavailable")), Absent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			api := fake.NewClientset().NetworkingV1().IPAddresses()
			if _, err := api.Create(ctx, tt.obj, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := DeleteOwned(ctx, api, tt.services, ip, releasing)
			if got != tt.want || (err != nil) != tt.retriable || allocation.IsRetriable(err) != tt.retriable {
				t.Errorf("DeleteOwned = %v, %v; want %v, retriable error %v", got, err, tt.want, tt.retriable)
			}
			if _, err := api.Get(ctx, ip.String(), metav1.GetOptions{}); err != nil {
				t.Errorf("the other Service's IPAddress was deleted: %v", err)
			}
		})
	}
}
