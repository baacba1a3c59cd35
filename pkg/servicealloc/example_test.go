package servicealloc_test

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/servicealloc"
	"github.com/allocator/allocator/pkg/subrange"
)

// newClusterIP is an in-memory bitmap allocator over cidr. A server whose
// allocators keep their state in memory must mark the stored Services'
// addresses in them before serving (see Config.StartClosed).
func newClusterIP(cidr string) *clusterip.Allocator {
	a, err := clusterip.NewAllocator(subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap))
	if err != nil {
		panic(err)
	}
	return a
}

// The steps a Service create goes through, as the store's hooks installed by
// NewREST run them: PrepareCreate defaults and validates without reserving,
// AllocateCreate reserves and fills spec.clusterIPs, and the transaction is
// committed once the Service is stored (or reverted when it is not). A
// delete calls Release once the Service is gone. Wired into a server, this
// is three calls (see the package doc and examples/embed):
//
//	alloc, err := servicealloc.New(servicealloc.Config{Allocators: ...})
//	err = store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: servicealloc.TrackDeletes(optsGetter)})
//	storage, err := servicealloc.NewREST(store, alloc, nil)
func Example() {
	ctx := context.Background()
	v4, v6 := newClusterIP("10.96.0.0/24"), newClusterIP("fd00::/108")
	alloc, err := servicealloc.New(servicealloc.Config{Allocators: []allocation.Interface{v4, v6}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(alloc.Families(), alloc.DualStack())

	policy := corev1.IPFamilyPolicyPreferDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			ClusterIP:      "10.96.0.10", // a chosen address, from the static band
			IPFamilyPolicy: &policy,
			Ports:          []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
		},
	}
	// 0. The decode-time defaults (targetPort, sessionAffinity, ...), which
	// the server's scheme applies to every Service it decodes.
	servicealloc.DefaultService(svc)
	// 1. Default the IP fields and validate; nothing is reserved yet.
	if err := alloc.PrepareCreate(ctx, svc); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(svc.Spec.IPFamilies)

	// 2. Reserve: the chosen IPv4 address as asked, an IPv6 one picked.
	txn, err := alloc.AllocateCreate(ctx, svc, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	v6ip := netip.MustParseAddr(svc.Spec.ClusterIPs[1])
	fmt.Println(svc.Spec.ClusterIP, v6.Range().Contains(v6ip), v4.Used(), v6.Used())

	// 3. The store wrote the Service: commit. Had the write failed,
	// txn.Revert would release both addresses.
	txn.Commit(ctx)

	// A second Service asking for the same address gets upstream's 422.
	other := svc.DeepCopy()
	other.Name, other.Spec.ClusterIPs, other.Spec.IPFamilies = "other", nil, nil
	if err := alloc.PrepareCreate(ctx, other); err != nil {
		fmt.Println(err)
		return
	}
	_, err = alloc.AllocateCreate(ctx, other, false)
	fmt.Println(apierrors.IsInvalid(err))
	fmt.Println(err)

	// The Service is deleted from storage: its addresses go back.
	alloc.Release(ctx, svc)
	fmt.Println(v4.Used(), v6.Used())
	// Output:
	// [IPv4 IPv6] true
	// [IPv4 IPv6]
	// 10.96.0.10 true 1 1
	// true
	// Service "other" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10",""]: failed to allocate IP 10.96.0.10: provided IP is already allocated
	// 0 0
}

// An invalid Service (two ports, neither named) reserves nothing:
// PrepareCreate refuses it with upstream's 422 before any address is
// reserved.
func ExampleAllocator_PrepareCreate() {
	v4 := newClusterIP("10.96.0.0/24")
	alloc, err := servicealloc.New(servicealloc.Config{Allocators: []allocation.Interface{v4}})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}
	servicealloc.DefaultService(svc)
	err = alloc.PrepareCreate(context.Background(), svc)
	fmt.Println(apierrors.IsInvalid(err), v4.Used())
	fmt.Println(err)
	// Output:
	// true 0
	// Service "web" is invalid: [spec.ports[0].name: Required value, spec.ports[1].name: Required value]
}
