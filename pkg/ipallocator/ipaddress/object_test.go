package ipaddress

import (
	"context"
	"net/netip"
	"testing"

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
	if got, err := DeleteOwned(ctx, api, ip, older); err != nil || got != OtherOwner {
		t.Fatalf("release for the older Service: %v, %v; want OtherOwner", got, err)
	}
	if _, err := api.Get(ctx, ip.String(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the newer Service's IPAddress is gone: %v", err)
	}
	if got, err := DeleteOwned(ctx, api, ip, newer); err != nil || got != Released {
		t.Fatalf("release for the newer Service: %v, %v; want Released", got, err)
	}
	if _, err := api.Get(ctx, ip.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after its owner's release the IPAddress is still there: %v", err)
	}
}
