package iprepair_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"

	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

// laggingList is a client whose Service lists leave one Service out, as a
// list served from a lagging cache does; every other call, a Get of that
// Service included, reaches the server.
type laggingList struct {
	kubernetes.Interface
	hide string // namespace/name
}

func (c laggingList) CoreV1() corev1client.CoreV1Interface {
	return laggingCore{CoreV1Interface: c.Interface.CoreV1(), hide: c.hide}
}

type laggingCore struct {
	corev1client.CoreV1Interface
	hide string
}

func (c laggingCore) Services(namespace string) corev1client.ServiceInterface {
	return laggingServices{ServiceInterface: c.CoreV1Interface.Services(namespace), hide: c.hide}
}

type laggingServices struct {
	corev1client.ServiceInterface
	hide string
}

func (s laggingServices) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ServiceList, error) {
	list, err := s.ServiceInterface.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	list.Items = slices.DeleteFunc(list.Items, func(svc corev1.Service) bool { return svc.Namespace+"/"+svc.Name == s.hide })
	return list, nil
}

// changedAfterGet is a client that runs change once, right after its first
// Get of the IPAddress named name has been answered: what that Get returned
// is stale by the time the caller writes.
type changedAfterGet struct {
	kubernetes.Interface
	name   string
	once   *sync.Once
	change func()
}

func (c changedAfterGet) NetworkingV1() networkingclient.NetworkingV1Interface {
	return changingNetworking{NetworkingV1Interface: c.Interface.NetworkingV1(), c: c}
}

type changingNetworking struct {
	networkingclient.NetworkingV1Interface
	c changedAfterGet
}

func (n changingNetworking) IPAddresses() networkingclient.IPAddressInterface {
	return changingIPAddresses{IPAddressInterface: n.NetworkingV1Interface.IPAddresses(), c: n.c}
}

type changingIPAddresses struct {
	networkingclient.IPAddressInterface
	c changedAfterGet
}

func (r changingIPAddresses) Get(ctx context.Context, name string, opts metav1.GetOptions) (*networkingv1.IPAddress, error) {
	obj, err := r.IPAddressInterface.Get(ctx, name, opts)
	if name == r.c.name {
		r.c.once.Do(r.c.change)
	}
	return obj, err
}

// TestIPAddressRepairOrphanRecheck feeds the repair a stale snapshot in which
// an IPAddress has no owner while the API server has one: the fresh read
// before the delete must keep it. It also checks that the delete is
// conditional on the object not having changed since that fresh read.
func TestIPAddressRepairOrphanRecheck(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := ipaddressServer(t, "10.0.0.0/24")
	svc, err := createService(ctx, srv, "late", "10.0.0.77")
	if err != nil {
		t.Fatal(err)
	}
	checkClaim(t, srv, "10.0.0.77", "default", "late")
	clock := &fakeClock{now: time.Now().Add(time.Hour)} // everything is past its grace
	stale := laggingList{Interface: srv.Client, hide: "default/late"}
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: stale, Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	if rep := runOnce(t, ctx, ctrl); rep.Writes != 0 {
		t.Fatalf("pass on a list without the Service: %d writes\n%s", rep.Writes, rep)
	}
	checkClaim(t, srv, "10.0.0.77", svc.Namespace, svc.Name)

	// An orphan changed between the repair's fresh read and its delete: the
	// delete, conditional on the read's resourceVersion, fails and removes
	// nothing.
	plantIPAddress(t, srv, "10.0.0.200", serviceRef("default", "ghost"), ourLabels("IPv4"), time.Now())
	touch := func() {
		ipa, err := srv.Client.NetworkingV1().IPAddresses().Get(ctx, "10.0.0.200", metav1.GetOptions{})
		if err != nil {
			t.Errorf("get the orphan to change it: %v", err)
			return
		}
		ipa.Annotations = map[string]string{"touched": "yes"}
		if _, err := srv.Client.NetworkingV1().IPAddresses().Update(ctx, ipa, metav1.UpdateOptions{}); err != nil {
			t.Errorf("change the orphan: %v", err)
		}
	}
	racing := changedAfterGet{Interface: srv.Client, name: "10.0.0.200", once: &sync.Once{}, change: touch}
	ctrl, err = iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: racing, Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	const changed = "delete ipaddress 10.0.0.200: changed while being repaired"
	rep, err := ctrl.RunOnce(ctx)
	if err == nil || !strings.Contains(err.Error(), changed) {
		t.Fatalf("pass whose orphan changed before the delete: %v, want %q", err, changed)
	}
	if rep.Writes != 0 {
		t.Fatalf("pass whose orphan changed before the delete: %d writes, want none\n%s", rep.Writes, rep)
	}
	if ipa := getIPAddress(t, srv, "10.0.0.200"); ipa == nil || ipa.Annotations["touched"] != "yes" {
		t.Fatalf("the changed orphan: %v, want it kept with its change", ipa)
	}
	checkClaim(t, srv, "10.0.0.77", svc.Namespace, svc.Name)
	// Unchanged since the next pass's fresh read, the orphan goes.
	if rep := runOnce(t, ctx, ctrl); rep.Writes != 1 || getIPAddress(t, srv, "10.0.0.200") != nil {
		t.Fatalf("next pass: %d writes, want the orphan deleted\n%s", rep.Writes, rep)
	}
}
