package clusterip_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// The in-memory bitmap allocator over one service CIDR: a dynamic
// allocation lands in the upper band, a chosen address from the static band
// is reserved as asked, a taken address is refused, and a released one can
// be taken again.
func ExampleAllocator() {
	ctx := context.Background()
	r := subrange.MustNew(netip.MustParsePrefix("10.96.0.0/24"), model.Bitmap)
	alloc, err := clusterip.NewAllocator(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The bitmap model records no owner; the IPAddress model does.
	owner := allocation.Owner{Namespace: "default", Name: "web"}

	// AllocateNext picks a random free address of the upper band while one
	// is left, so the static band stays free for Services that ask for an
	// address.
	ip, err := alloc.AllocateNext(ctx, owner)
	fmt.Println(err, r.Contains(ip), r.InStaticBand(ip))

	dns := netip.MustParseAddr("10.96.0.10")
	fmt.Println(r.InStaticBand(dns), alloc.Allocate(ctx, dns, owner))
	err = alloc.Allocate(ctx, dns, owner)
	fmt.Println(err, errors.Is(err, allocation.ErrAllocated))

	err = alloc.Allocate(ctx, netip.MustParseAddr("10.97.0.10"), owner)
	fmt.Println(errors.Is(err, allocation.ErrNotInRange))

	fmt.Println(alloc.Release(ctx, dns, owner))
	fmt.Println(alloc.Allocate(ctx, dns, owner))
	fmt.Println("used:", alloc.Used(), "free:", alloc.Free())
	// Output:
	// <nil> true false
	// true <nil>
	// provided IP is already allocated true
	// true
	// <nil>
	// <nil>
	// used: 2 free: 252
}

// When no address is left, AllocateNext fails with kube-apiserver's text;
// allocation.Hint tells the operator what makes room.
func ExampleAllocator_AllocateNext_full() {
	ctx := context.Background()
	alloc, err := clusterip.NewAllocator(subrange.MustNew(netip.MustParsePrefix("10.96.0.0/30"), model.Bitmap))
	if err != nil {
		fmt.Println(err)
		return
	}
	owner := allocation.Owner{Namespace: "default", Name: "web"}
	for {
		if _, err := alloc.AllocateNext(ctx, owner); err != nil {
			fmt.Println(err, errors.Is(err, allocation.ErrFull), allocation.Hint(err) != "")
			break
		}
	}
	fmt.Println("used:", alloc.Used())
	// Output:
	// range is full true true
	// used: 2
}

// The dry-run view answers like the allocator but changes nothing, which is
// how a dry-run Service create checks its addresses.
func ExampleAllocator_DryRun() {
	ctx := context.Background()
	alloc, err := clusterip.NewAllocator(subrange.MustNew(netip.MustParsePrefix("10.96.0.0/24"), model.Bitmap))
	if err != nil {
		fmt.Println(err)
		return
	}
	owner := allocation.Owner{Namespace: "default", Name: "web"}
	ip := netip.MustParseAddr("10.96.0.10")
	fmt.Println(alloc.DryRun().Allocate(ctx, ip, owner))
	taken, _ := alloc.Has(ctx, ip)
	fmt.Println(taken)
	// Output:
	// <nil>
	// false
}
