package clusterip

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

var owner = allocation.Owner{Namespace: "default", Name: "svc"}

func newTestAllocator(t testing.TB, cidr string) *Allocator {
	t.Helper()
	a, err := NewAllocator(subrange.MustNew(netip.MustParsePrefix(cidr), model.Bitmap))
	if err != nil {
		t.Fatalf("NewAllocator(%s): %v", cidr, err)
	}
	return a
}

// TestAllocatorExhaustive drains small ranges with AllocateNext and checks the
// band order, then allocates every lower-band address statically.
func TestAllocatorExhaustive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, cidr := range []string{"10.0.0.0/24", "10.0.0.128/25", "10.0.0.32/27", "10.0.0.16/28", "10.0.0.4/30",
		"10.0.0.2/31", "10.0.0.1/32", "fd00::/120", "fd00::10/124", "fd00::4/126", "fd00::2/127", "fd00::1/128"} {
		t.Run(cidr, func(t *testing.T) {
			a := newTestAllocator(t, cidr)
			r := a.Range()
			seen := map[netip.Addr]bool{}
			lowerSeen := false
			for {
				ip, err := a.AllocateNext(ctx, owner)
				if errors.Is(err, allocation.ErrFull) {
					if err.Error() != "range is full" || !strings.Contains(allocation.Hint(err), r.Prefix().String()+" (--service-cluster-ip-range) has no free address") {
						t.Fatalf("full: %v (hint %q), want kube-apiserver's text and a hint naming the range", err, allocation.Hint(err))
					}
					break
				}
				if err != nil {
					t.Fatalf("AllocateNext: %v", err)
				}
				if seen[ip] || !r.Contains(ip) {
					t.Fatalf("AllocateNext gave %s: duplicate %v, usable %v", ip, seen[ip], r.Contains(ip))
				}
				seen[ip] = true
				if r.InStaticBand(ip) {
					lowerSeen = true
				} else if lowerSeen {
					t.Fatalf("upper-band %s handed out after a lower-band address", ip)
				}
				if len(seen) > int(r.Size()) {
					t.Fatalf("more allocations than the range size %d", r.Size())
				}
			}
			if uint64(len(seen)) != r.Size() || a.Free() != 0 || a.Used() != int(r.Size()) {
				t.Fatalf("drained %d of %d (used %d, free %d)", len(seen), r.Size(), a.Used(), a.Free())
			}
			if r.Size() == 0 {
				return
			}
			if err := a.Allocate(ctx, r.First(), owner); !errors.Is(err, allocation.ErrAllocated) {
				t.Fatalf("Allocate(taken %s) = %v, want ErrAllocated", r.First(), err)
			}
			fresh := newTestAllocator(t, cidr)
			for i := uint64(0); i < r.StaticSize(); i++ {
				ip, _ := r.Addr(i)
				if err := fresh.Allocate(ctx, ip, owner); err != nil {
					t.Fatalf("static Allocate(%s): %v", ip, err)
				}
			}
			u, _ := fresh.Usage(ctx)
			if u.StaticUsed != r.StaticSize() || u.DynamicUsed() != 0 {
				t.Fatalf("after static fill, usage %+v", u)
			}
		})
	}
}

func TestAllocatorErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newTestAllocator(t, "10.0.0.0/24")
	for _, ip := range []string{"10.0.0.0", "10.0.0.255", "10.0.1.1", "fd00::1", "::ffff:10.0.0.5"} {
		err := a.Allocate(ctx, netip.MustParseAddr(ip), owner)
		var notInRange *allocation.NotInRangeError
		if !errors.As(err, &notInRange) || !errors.Is(err, allocation.ErrNotInRange) ||
			!strings.Contains(err.Error(), "is not in the valid range") {
			t.Errorf("Allocate(%s) = %v, want a NotInRangeError", ip, err)
		}
		if err := a.Release(ctx, netip.MustParseAddr(ip), owner); err != nil {
			t.Errorf("Release(%s) out of range = %v, want silent no-op", ip, err)
		}
	}
	ip := netip.MustParseAddr("10.0.0.7")
	if err := a.Release(ctx, ip, owner); err != nil {
		t.Fatalf("Release of an unallocated IP = %v", err)
	}
	if err := a.Allocate(ctx, ip, owner); err != nil {
		t.Fatal(err)
	}
	if err := a.Allocate(ctx, ip, owner); !errors.Is(err, allocation.ErrAllocated) || err.Error() != "provided IP is already allocated" {
		t.Fatalf("second Allocate = %v", err)
	}
	if has, _ := a.Has(ctx, ip); !has {
		t.Fatalf("Has(%s) = false after Allocate", ip)
	}
	if err := a.Release(ctx, ip, owner); err != nil {
		t.Fatal(err)
	}
	if has, _ := a.Has(ctx, ip); has {
		t.Fatalf("Has(%s) = true after Release", ip)
	}
}

func TestAllocatorDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newTestAllocator(t, "10.0.0.0/28")
	taken := netip.MustParseAddr("10.0.0.3")
	if err := a.Allocate(ctx, taken, owner); err != nil {
		t.Fatal(err)
	}
	dry := a.DryRun()
	if err := dry.Allocate(ctx, taken, owner); !errors.Is(err, allocation.ErrAllocated) {
		t.Fatalf("dry-run Allocate(taken) = %v", err)
	}
	if err := dry.Allocate(ctx, netip.MustParseAddr("10.0.0.4"), owner); err != nil {
		t.Fatalf("dry-run Allocate(free) = %v", err)
	}
	if err := dry.Allocate(ctx, netip.MustParseAddr("10.0.0.15"), owner); !errors.Is(err, allocation.ErrNotInRange) {
		t.Fatalf("dry-run Allocate(broadcast) = %v", err)
	}
	next, err := dry.AllocateNext(ctx, owner)
	if err != nil || !a.Range().Contains(next) || next == taken {
		t.Fatalf("dry-run AllocateNext = %s, %v", next, err)
	}
	if err := dry.Release(ctx, taken, owner); err != nil {
		t.Fatal(err)
	}
	if a.Used() != 1 {
		t.Fatalf("dry run changed the allocator: used %d", a.Used())
	}
	if has, _ := a.Has(ctx, taken); !has {
		t.Fatalf("dry-run Release freed %s", taken)
	}
	if has, _ := a.Has(ctx, netip.MustParseAddr("10.0.0.4")); has {
		t.Fatalf("dry-run Allocate reserved 10.0.0.4")
	}
}

func TestAllocatorSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// design.md §5: 10.0.0.0/24 with .1 and .10 allocated → data 02 01.
	a := newTestAllocator(t, "10.0.0.0/24")
	for _, ip := range []string{"10.0.0.1", "10.0.0.10"} {
		if err := a.Allocate(ctx, netip.MustParseAddr(ip), owner); err != nil {
			t.Fatal(err)
		}
	}
	spec, data := a.Snapshot()
	if spec != "10.0.0.0/24" || !bytes.Equal(data, []byte{0x02, 0x01}) {
		t.Fatalf("Snapshot = %q % x, want 10.0.0.0/24 02 01", spec, data)
	}

	// A full /24: 254 bits, the top two bits of the first byte are clear.
	full := newTestAllocator(t, "10.0.0.0/24")
	for {
		if _, err := full.AllocateNext(ctx, owner); err != nil {
			break
		}
	}
	want := append([]byte{0x3f}, bytes.Repeat([]byte{0xff}, 31)...)
	if _, data := full.Snapshot(); !bytes.Equal(data, want) {
		t.Fatalf("full /24 snapshot = % x, want % x", data, want)
	}

	// Round trip into a fresh allocator.
	restored := newTestAllocator(t, "10.0.0.0/24")
	if err := restored.Restore(spec, data); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	var got []string
	restored.ForEach(ctx, func(ip netip.Addr) { got = append(got, ip.String()) })
	if strings.Join(got, ",") != "10.0.0.1,10.0.0.10" {
		t.Fatalf("restored IPs = %v", got)
	}

	// Another range, or garbage, is refused and changes nothing.
	for _, other := range []string{"10.0.1.0/24", "10.0.0.0/23", "fd00::/120", "", "10.0.0.0"} {
		if err := restored.Restore(other, []byte{0xff}); !errors.Is(err, allocation.ErrMismatchedNetwork) ||
			!strings.Contains(err.Error(), "the provided network does not match the current range") {
			t.Errorf("Restore(%q) = %v, want ErrMismatchedNetwork", other, err)
		}
	}
	// Bits beyond the 254 usable addresses are an error, not silently counted.
	beyond := append([]byte{0x40}, bytes.Repeat([]byte{0}, 31)...)
	var beyondErr *bitset.DataBeyondRangeError
	if err := restored.Restore("10.0.0.0/24", beyond); !errors.As(err, &beyondErr) {
		t.Fatalf("Restore(bit 254) = %v, want DataBeyondRangeError", err)
	}
	if restored.Used() != 2 {
		t.Fatalf("failed restores changed the allocator: used %d", restored.Used())
	}
}

// TestAllocatorUpperBandFirst is the 128-address case at IP level: an IPv4 /25
// has 126 usable addresses and a 16-address static band, so the first 110
// dynamic allocations come from the upper band.
func TestAllocatorUpperBandFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newTestAllocator(t, "10.0.0.0/25")
	for i := 0; i < 110; i++ {
		ip, err := a.AllocateNext(ctx, owner)
		if err != nil || a.Range().InStaticBand(ip) {
			t.Fatalf("allocation %d = %s, %v: want an upper-band address", i, ip, err)
		}
	}
	ip, err := a.AllocateNext(ctx, owner)
	if err != nil || !a.Range().InStaticBand(ip) {
		t.Fatalf("allocation 111 = %s, %v: want a lower-band address", ip, err)
	}
}

func TestNewAllocatorTooLarge(t *testing.T) {
	t.Parallel()
	r := subrange.MustNew(netip.MustParsePrefix("10.0.0.0/7"), model.IPAddress)
	if _, err := NewAllocator(r); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("NewAllocator(/7) = %v, want a size error", err)
	}
}
