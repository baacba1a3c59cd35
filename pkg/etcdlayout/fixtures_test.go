package etcdlayout

import (
	"bytes"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allocator/allocator/internal/fixtures"
)

// kindOfKey is the kind kube-apiserver stores under each key family.
func kindOfKey(l Layout, key string) string {
	switch {
	case strings.HasPrefix(key, l.RangesPrefix()):
		return "RangeAllocation"
	case strings.HasPrefix(key, l.ServicesPrefix()):
		return "Service"
	case strings.HasPrefix(key, l.IPAddressesPrefix()):
		return "IPAddress"
	case strings.HasPrefix(key, l.ServiceCIDRsPrefix()):
		return "ServiceCIDR"
	case strings.HasPrefix(key, l.NamespacesPrefix()):
		return "Namespace"
	}
	return ""
}

// setBits lists the indexes of the set bits of a big-endian bitmap, where
// bit 0 is the least significant bit of the last byte.
func setBits(data []byte) []int {
	var out []int
	for i := 0; i < len(data)*8; i++ {
		if data[len(data)-1-i/8]>>(i%8)&1 == 1 {
			out = append(out, i)
		}
	}
	return out
}

// addrAt returns network + 1 + index.
func addrAt(prefix netip.Prefix, index int) netip.Addr {
	n := new(big.Int).SetBytes(prefix.Addr().AsSlice())
	n.Add(n, big.NewInt(int64(index)+1))
	b := n.FillBytes(make([]byte, prefix.Addr().BitLen()/8))
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestFixtures decodes every value kube-apiserver wrote, checks it against
// what kubectl showed, and checks that re-encoding gives the same bytes.
//
// Every value of the captures (RangeAllocation, Service, Namespace,
// IPAddress, ServiceCIDR, from v1.32.13, v1.33.13 and v1.36.3; 1.33 stores
// IPAddress and ServiceCIDR as networking.k8s.io/v1beta1, which Decode keeps
// and the typed decoders convert to v1) re-encodes byte for byte:
// kube-apiserver and this package use the same generated gogo-protobuf
// marshallers, which write fields in field-number order, and none of the
// captured objects sets a field that k8s.io/api v0.37 does not know (unknown
// fields would be dropped on decode and the bytes would differ).
func TestFixtures(t *testing.T) {
	t.Parallel()
	for _, name := range []string{fixtures.Bitmap132, fixtures.IPAddress133, fixtures.IPAddress136} {
		t.Run(name, func(t *testing.T) {
			f := fixtures.Load(t, name)
			l := Layout{Prefix: f.EtcdPrefix}
			services := map[string][]string{}
			var namespaces []string
			objects := map[string]runtime.Object{}

			for _, kv := range f.KVs {
				obj, err := Decode(kv.Value)
				if err != nil {
					t.Errorf("%v", WithKey(kv.Key, err))
					continue
				}
				objects[kv.Key] = obj
				if got, want := obj.GetObjectKind().GroupVersionKind().Kind, kindOfKey(l, kv.Key); got != want {
					t.Errorf("%s: kind %q, want %q", kv.Key, got, want)
				}
				re, err := Encode(obj)
				if err != nil {
					t.Errorf("%v", WithKey(kv.Key, err))
				} else if !bytes.Equal(re, kv.Value) {
					t.Errorf("%s: re-encoded value differs from what kube-apiserver wrote:\n%s", kv.Key, cmp.Diff(kv.Value, re))
				}
				switch o := obj.(type) {
				case *corev1.Service:
					if l.Service(o.Namespace, o.Name) != kv.Key {
						t.Errorf("%s: holds Service %s/%s", kv.Key, o.Namespace, o.Name)
					}
					services[o.Namespace+"/"+o.Name] = o.Spec.ClusterIPs
				case *corev1.Namespace:
					if l.Namespace(o.Name) != kv.Key {
						t.Errorf("%s: holds Namespace %s", kv.Key, o.Name)
					}
					namespaces = append(namespaces, o.Name)
				}
			}
			if diff := cmp.Diff(f.Expect.Services, services); diff != "" {
				t.Errorf("Services' clusterIPs (-kubectl +etcd):\n%s", diff)
			}
			slices.Sort(namespaces)
			if diff := cmp.Diff(f.Expect.Namespaces, namespaces); diff != "" {
				t.Errorf("namespaces (-kubectl +etcd):\n%s", diff)
			}

			for key, want := range f.Expect.Bitmaps {
				value, ok := f.Value(key)
				if !ok {
					t.Errorf("bitmap %s missing", key)
					continue
				}
				ra, err := DecodeRangeAllocation(value)
				if err != nil {
					t.Errorf("%v", WithKey(key, err))
					continue
				}
				if ra.Range != want.Range {
					t.Errorf("%s: range %q, want %q", key, ra.Range, want.Range)
				}
				if len(ra.Data) > 0 && ra.Data[0] == 0 {
					t.Errorf("%s: data has a leading zero byte", key)
				}
				wantBits := slices.Sorted(slices.Values(want.BitIndexes))
				if diff := cmp.Diff(wantBits, setBits(ra.Data)); diff != "" {
					t.Errorf("%s: set bits (-want +got):\n%s", key, diff)
				}
				prefix := netip.MustParsePrefix(want.Range)
				for i, ip := range want.IPs {
					if got := addrAt(prefix, want.BitIndexes[i]); got.String() != ip {
						t.Errorf("%s: bit %d is %s, fixture says %s", key, want.BitIndexes[i], got, ip)
					}
				}
				// The capture is also what EncodeRangeAllocation writes.
				enc, err := EncodeRangeAllocation(ra.Range, ra.Data)
				if err != nil || !bytes.Equal(enc, value) {
					t.Errorf("%s: EncodeRangeAllocation differs from the capture (err %v)", key, err)
				}
			}

			for ip, want := range f.Expect.IPAddresses {
				key := l.IPAddress(ip)
				value, _ := f.Value(key)
				obj, err := DecodeIPAddress(value)
				if err != nil {
					t.Errorf("%s: %v", key, err)
					continue
				}
				if obj.APIVersion != "networking.k8s.io/v1" {
					t.Errorf("%s: DecodeIPAddress gave apiVersion %q", key, obj.APIVersion)
				}
				got := struct {
					Name, ParentRef string
					Labels          map[string]string
				}{Name: obj.Name, Labels: obj.Labels}
				if p := obj.Spec.ParentRef; p != nil {
					got.ParentRef = strings.Join([]string{p.Group, p.Resource, p.Namespace, p.Name}, "/")
				}
				if diff := cmp.Diff(ip, got.Name); diff != "" {
					t.Errorf("%s: name (-want +got):\n%s", key, diff)
				}
				if diff := cmp.Diff(want.ParentRef, got.ParentRef); diff != "" {
					t.Errorf("%s: parentRef (-want +got):\n%s", key, diff)
				}
				if diff := cmp.Diff(want.Labels, got.Labels); diff != "" {
					t.Errorf("%s: labels (-want +got):\n%s", key, diff)
				}
			}
			if n := countKind(objects, "IPAddress"); n != len(f.Expect.IPAddresses) {
				t.Errorf("%d IPAddresses in etcd, kubectl showed %d", n, len(f.Expect.IPAddresses))
			}

			for name, want := range f.Expect.ServiceCIDRs {
				key := l.ServiceCIDR(name)
				value, _ := f.Value(key)
				obj, err := DecodeServiceCIDR(value)
				if err != nil {
					t.Errorf("%s: %v", key, err)
					continue
				}
				var ready *string
				for _, c := range obj.Status.Conditions {
					if c.Type == networkingv1.ServiceCIDRConditionReady {
						s := string(c.Status)
						ready = &s
					}
				}
				got := struct {
					CIDRs, Finalizers []string
					Ready             *string
				}{obj.Spec.CIDRs, obj.Finalizers, ready}
				wantS := struct {
					CIDRs, Finalizers []string
					Ready             *string
				}{want.CIDRs, want.Finalizers, want.ReadyCondition}
				if diff := cmp.Diff(wantS, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s (-want +got):\n%s", key, diff)
				}
			}
			if n := countKind(objects, "ServiceCIDR"); n != len(f.Expect.ServiceCIDRs) {
				t.Errorf("%d ServiceCIDRs in etcd, kubectl showed %d", n, len(f.Expect.ServiceCIDRs))
			}
		})
	}
}

func countKind(objects map[string]runtime.Object, kind string) int {
	n := 0
	for _, o := range objects {
		if o.GetObjectKind().GroupVersionKind().Kind == kind {
			n++
		}
	}
	return n
}

// TestFixtureBitmapShape checks the facts the fixtures README states about
// the captured bitmap.
func TestFixtureBitmapShape(t *testing.T) {
	t.Parallel()
	f := fixtures.Load(t, fixtures.Bitmap132)
	value, _ := f.Value(Layout{}.PrimaryServiceIPRange())
	ra, err := DecodeRangeAllocation(value)
	if err != nil {
		t.Fatal(err)
	}
	got := []int{len(ra.Data), int(ra.Data[0]), int(ra.Data[len(ra.Data)-2]), int(ra.Data[len(ra.Data)-1])}
	if diff := cmp.Diff([]int{7454, 0x20, 0x02, 0x01}, got); diff != "" {
		t.Errorf("(len, first byte, last two bytes) (-README +got):\n%s", diff)
	}
	if bits := setBits(ra.Data); slices.Contains(bits, 9547) || len(bits) != 23 {
		t.Errorf("deleted dyn-05 (index 9547) still set, or %d bits set, want 23", len(bits))
	}
}

// TestFixtureNodePortRange pins the other RangeAllocation kube-apiserver
// writes at startup to hand-built bytes.
func TestFixtureNodePortRange(t *testing.T) {
	t.Parallel()
	for _, name := range []string{fixtures.Bitmap132, fixtures.IPAddress133, fixtures.IPAddress136} {
		f := fixtures.Load(t, name)
		got, ok := f.Value(Layout{Prefix: f.EtcdPrefix}.ServiceNodePortRange())
		if !ok {
			t.Fatalf("%s: no servicenodeports key", name)
		}
		if diff := cmp.Diff(rangeAllocationBytes("30000-32767", nil), got); diff != "" {
			t.Errorf("%s: servicenodeports (-hand-built +captured):\n%s", name, diff)
		}
	}
}
