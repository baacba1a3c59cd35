package ipaddress_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// The IPAddress-model allocator over one ServiceCIDR, driven by client-go's
// fake clientset instead of an API server. Each allocation creates an
// IPAddress named after the address; a release deletes it if it still
// belongs to the owner.
func ExampleAllocator() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the allocator's informers

	// A ServiceCIDR without a Ready condition counts as ready.
	client := fake.NewClientset(&networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/24"}},
	})
	alloc, err := ipaddress.New(ctx, ipaddress.Config{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Until its informers have synced, the allocator answers
	// allocation.ErrNotReady.
	if err := alloc.WaitReady(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(alloc.Ranges())

	owner := allocation.Owner{Namespace: "default", Name: "web"}
	r := subrange.MustNew(netip.MustParsePrefix("10.96.0.0/24"), model.IPAddress)

	// AllocateNext picks a random free address of the upper band.
	ip, err := alloc.AllocateNext(ctx, owner)
	fmt.Println(err, r.Contains(ip), r.InStaticBand(ip))

	dns := netip.MustParseAddr("10.96.0.10")
	fmt.Println(alloc.Allocate(ctx, dns, owner))
	obj, err := client.NetworkingV1().IPAddresses().Get(ctx, dns.String(), metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ref := obj.Spec.ParentRef
	fmt.Printf("IPAddress %s: %s %s/%s, managed by %s\n", obj.Name, ref.Resource, ref.Namespace, ref.Name, obj.Labels[ipaddress.LabelManagedBy])

	// The create of the IPAddress is the claim: a second one is refused.
	err = alloc.Allocate(ctx, dns, owner)
	fmt.Println(errors.Is(err, allocation.ErrAllocated))
	// An address in no ServiceCIDR is refused with upstream's error.
	err = alloc.Allocate(ctx, netip.MustParseAddr("10.97.0.10"), owner)
	fmt.Println(err)

	// Another Service's release leaves the address alone; the owner's frees it.
	fmt.Println(alloc.Release(ctx, dns, allocation.Owner{Namespace: "default", Name: "other"}))
	held, _ := alloc.Has(ctx, dns)
	fmt.Println(held)
	fmt.Println(alloc.Release(ctx, dns, owner))
	held, _ = alloc.Has(ctx, dns)
	fmt.Println(held)
	// Output:
	// [10.96.0.0/24]
	// <nil> true false
	// <nil>
	// IPAddress 10.96.0.10: services default/web, managed by ipallocator.k8s.io
	// true
	// the provided network does not match the current range
	// <nil>
	// true
	// <nil>
	// false
}
