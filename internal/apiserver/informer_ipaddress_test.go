package apiserver

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// scaleIPAddress is the i-th IPAddress as the server stores it for
// scaleService(i)'s address, with its managedFields.
func scaleIPAddress(i int) *networkingv1.IPAddress {
	addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	if i%10 == 0 {
		addr = netip.AddrFrom16([16]byte{0xfd, 15: byte(i), 14: byte(i >> 8), 13: byte(i >> 16)})
	}
	ipa := ipaddress.NewObject(addr, allocation.Owner{Namespace: "scale", Name: fmt.Sprintf("s-%06d", i), UID: "0b6f1c2e-5d4a-4f3b-9c8d-7e6f5a4b3c2d"})
	ipa.UID, ipa.ResourceVersion, ipa.CreationTimestamp = "7c1e2d3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", fmt.Sprint(100000+i), created
	ipa.ManagedFields = createManagedFields()
	return ipa
}

// TestCompactIPAddress: the cached IPAddresses of one family share one
// label map, equal to what each was; labels of any other shape stay each
// object's own; a copy for a write has a map of its own; a second
// transform writes nothing.
func TestCompactIPAddress(t *testing.T) {
	t.Parallel()
	v4a, v4b, v6 := scaleIPAddress(1), scaleIPAddress(2), scaleIPAddress(10)
	var got []*networkingv1.IPAddress
	for _, ipa := range []*networkingv1.IPAddress{v4a, v4b, v6} {
		want := ipa.DeepCopy()
		want.ManagedFields = nil
		want.Annotations = nil // the Service UID, not kept
		obj, err := informerTransform(ipa)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, obj); diff != "" {
			t.Errorf("%s (-want +got):\n%s", ipa.Name, diff)
		}
		got = append(got, obj.(*networkingv1.IPAddress))
	}
	if !sameMap(got[0].Labels, got[1].Labels) {
		t.Error("two IPv4 IPAddresses hold label maps of their own")
	}
	if sameMap(got[0].Labels, got[2].Labels) {
		t.Error("an IPv4 and an IPv6 IPAddress share a label map")
	}

	// A writer's copy: its map is its own, and the shared one unchanged.
	updated := got[0].DeepCopy()
	updated.Labels[ipaddress.LabelIPFamily] = "broken"
	if got[1].Labels[ipaddress.LabelIPFamily] != "IPv4" {
		t.Fatalf("a write to a copy reached the shared map: %v", got[1].Labels)
	}

	// Labels of any other shape are left as they are.
	for name, labels := range map[string]map[string]string{
		"a third label":       {ipaddress.LabelIPFamily: "IPv4", ipaddress.LabelManagedBy: ipaddress.ManagedBy, "team": "a"},
		"another manager":     {ipaddress.LabelIPFamily: "IPv4", ipaddress.LabelManagedBy: "someone-else"},
		"an unknown family":   {ipaddress.LabelIPFamily: "IPv5", ipaddress.LabelManagedBy: ipaddress.ManagedBy},
		"the family missing":  {ipaddress.LabelManagedBy: ipaddress.ManagedBy, "x": "IPv4"},
		"one label":           {ipaddress.LabelManagedBy: ipaddress.ManagedBy},
		"no labels (foreign)": nil,
	} {
		ipa := scaleIPAddress(3)
		ipa.Labels = labels
		slim.CompactIPAddress(ipa)
		if !sameMap(ipa.Labels, labels) {
			t.Errorf("%s: labels %v replaced by %v", name, labels, ipa.Labels)
		}
	}

	// Transformed again (an object seen twice), it is not written to.
	again := got[0]
	shared := again.Labels
	slim.CompactIPAddress(again)
	if !sameMap(again.Labels, shared) {
		t.Error("a second transform replaced the shared map")
	}
}

// BenchmarkIPAddressBytes reports the heap each cached IPAddress holds
// (B/ipaddress: the live heap after a collection, over 100,000 of them)
// as decoded, without managedFields, and as the informer keeps it.
//
//	go test ./internal/apiserver/ -run '^$' -bench BenchmarkIPAddressBytes -benchtime 1x -benchmem
func BenchmarkIPAddressBytes(b *testing.B) {
	benchmarkHeldBytes(b, "B/ipaddress", func(i int) ([]byte, error) { return scaleIPAddress(i).Marshal() },
		func(data []byte) (any, error) {
			ipa := &networkingv1.IPAddress{}
			return ipa, ipa.Unmarshal(data)
		},
		[]namedTransform{
			{"decoded", func(obj any) (any, error) { return obj, nil }},
			{"without-managedFields", stripManagedFields},
			{"cached", informerTransform},
		})
}
