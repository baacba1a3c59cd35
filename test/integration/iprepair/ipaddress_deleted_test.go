package iprepair_test

import (
	"context"
	"sync"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"

	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

// racingClient runs before once, just ahead of the first IPAddress create.
type racingClient struct {
	kubernetes.Interface
	once   *sync.Once
	before func()
}

func (c racingClient) NetworkingV1() networkingclient.NetworkingV1Interface {
	return racingNetworking{NetworkingV1Interface: c.Interface.NetworkingV1(), c: c}
}

type racingNetworking struct {
	networkingclient.NetworkingV1Interface
	c racingClient
}

func (n racingNetworking) IPAddresses() networkingclient.IPAddressInterface {
	return racingIPAddresses{IPAddressInterface: n.NetworkingV1Interface.IPAddresses(), c: n.c}
}

type racingIPAddresses struct {
	networkingclient.IPAddressInterface
	c racingClient
}

func (r racingIPAddresses) Create(ctx context.Context, obj *networkingv1.IPAddress, opts metav1.CreateOptions) (*networkingv1.IPAddress, error) {
	r.c.once.Do(r.c.before)
	return r.IPAddressInterface.Create(ctx, obj, opts)
}

// TestIPAddressRepairServiceDeletedDuringCreate: a Service read again by
// the repair (still holding its address, no IPAddress) and deleted before
// the repair's IPAddress create, its release finding nothing to delete,
// leaves no IPAddress behind: the repair reads the Service once more after
// the create and takes the IPAddress back. Before, the IPAddress stayed an
// orphan until the grace period, its address refused to static creates
// (seen in TestSingleStack under load: "provided IP is already allocated"
// right after a delete).
func TestIPAddressRepairServiceDeletedDuringCreate(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	svc, err := createService(ctx, srv, "gone", "10.0.0.30")
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	// The Service's IPAddress lost (an operator's delete), so the repair
	// will create it.
	if err := srv.Client.NetworkingV1().IPAddresses().Delete(ctx, ip, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := false
	client := racingClient{Interface: srv.Client, once: &sync.Once{}, before: func() {
		err := srv.Client.CoreV1().Services("default").Delete(ctx, "gone", metav1.DeleteOptions{})
		deleted = err == nil
	}}
	repair, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repair.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !deleted {
		t.Fatal("the Service was not deleted ahead of the repair's create: the test proves nothing")
	}
	if got, err := srv.Client.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("IPAddress %s of the deleted Service left behind: %+v, %v", ip, got.Spec.ParentRef, err)
	}
	if _, err := createService(ctx, srv, "taker", ip); err != nil {
		t.Errorf("the deleted Service's address is not free: %v", err)
	}
}
