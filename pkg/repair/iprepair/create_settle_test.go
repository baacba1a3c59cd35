package iprepair

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typednetworkingv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/allocator/allocator/pkg/repair"
)

// TestCreateFinishedAfterCancel: the repair creates the IPAddress of a
// Service that is deleted meanwhile (its release found no IPAddress to
// delete), and the server begins to stop during the create, which cancels
// the repair's context. The create is still finished: the Service is read
// again, found gone, and the IPAddress taken back, so no IPAddress is left
// naming a Service that is gone on an address free in the bitmap.
func TestCreateFinishedAfterCancel(t *testing.T) {
	t.Parallel()
	ip := netip.MustParseAddr("10.0.0.5")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deleted", UID: "uid-1"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip.String(), ClusterIPs: []string{ip.String()}},
	}
	fc := fake.NewClientset(svc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc.PrependReactor("create", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := fc.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("services"), svc.Namespace, svc.Name); err != nil {
			return true, nil, err
		}
		cancel()
		return false, nil, nil // the create itself goes on
	})
	r := &IPAddressRepair{cfg: IPAddressConfig{Options: repair.Options{Client: endedContextRefused{fc}}}}

	if err := r.create(ctx, ip, svc); !errors.Is(err, errHolderGone) {
		t.Errorf("create for a Service deleted meanwhile: %v, want errHolderGone", err)
	}
	if obj, err := fc.NetworkingV1().IPAddresses().Get(context.Background(), ip.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the IPAddress is still there (%v, %v), naming a Service that is gone", obj.GetName(), err)
	}
}

// endedContextRefused is a clientset whose Service reads and IPAddress
// deletes fail once their context has ended, as a real client does not
// send a request then; the fake clientset ignores contexts.
type endedContextRefused struct{ kubernetes.Interface }

func (c endedContextRefused) CoreV1() typedcorev1.CoreV1Interface {
	return refusingCore{c.Interface.CoreV1()}
}

func (c endedContextRefused) NetworkingV1() typednetworkingv1.NetworkingV1Interface {
	return refusingNetworking{c.Interface.NetworkingV1()}
}

type refusingCore struct{ typedcorev1.CoreV1Interface }

func (c refusingCore) Services(namespace string) typedcorev1.ServiceInterface {
	return refusingServices{c.CoreV1Interface.Services(namespace)}
}

type refusingServices struct{ typedcorev1.ServiceInterface }

func (s refusingServices) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Service, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.ServiceInterface.Get(ctx, name, opts)
}

type refusingNetworking struct {
	typednetworkingv1.NetworkingV1Interface
}

func (n refusingNetworking) IPAddresses() typednetworkingv1.IPAddressInterface {
	return refusingIPAddresses{n.NetworkingV1Interface.IPAddresses()}
}

type refusingIPAddresses struct {
	typednetworkingv1.IPAddressInterface
}

func (a refusingIPAddresses) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return a.IPAddressInterface.Delete(ctx, name, opts)
}
