package apiserver

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/utils/ptr"

	"github.com/allocator/allocator/internal/mutate"
	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// encodeStored encodes each object as the server stores it, by name, and
// the first as JSON too (a cluster whose values were written as JSON).
func encodeStored(t testing.TB, group string, objs map[string]runtime.Object, first string) map[string][]byte {
	codec := storageCodec(group)
	out := map[string][]byte{}
	for name, obj := range objs {
		data, err := runtime.Encode(codec, obj)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = data
	}
	var js bytes.Buffer
	if err := json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme, json.SerializerOptions{}).
		Encode(objs[first], &js); err != nil {
		t.Fatal(err)
	}
	out[first+" as JSON"] = js.Bytes()
	return out
}

// storedServices are Services as the server stores them: every reader
// case, and each again with what the decode's defaults fill left unset.
func storedServices(t testing.TB) map[string][]byte {
	objs := map[string]runtime.Object{"empty": &corev1.Service{}}
	for name, svc := range readerCases() {
		objs[name] = svc
		bare := svc.DeepCopy()
		bare.Spec.Type, bare.Spec.ExternalTrafficPolicy = "", ""
		for i := range bare.Spec.Ports {
			bare.Spec.Ports[i].Protocol = ""
		}
		objs[name+", defaults unset"] = bare
	}
	withIPs := fullService()
	withIPs.Spec.Type, withIPs.Spec.ExternalTrafficPolicy = corev1.ServiceTypeClusterIP, ""
	objs["ClusterIP with externalIPs, policy unset"] = withIPs
	return encodeStored(t, "", objs, "full")
}

// storedIPAddresses are IPAddresses as the server stores them: an
// allocator's of each family, and others with every metadata field set and
// with labels of other shapes.
func storedIPAddresses(t testing.TB) map[string][]byte {
	objs := map[string]runtime.Object{"empty": &networkingv1.IPAddress{}, "IPv4": scaleIPAddress(1), "IPv6": scaleIPAddress(10)}
	with := func(name string, change func(*networkingv1.IPAddress)) {
		ipa := scaleIPAddress(3)
		change(ipa)
		objs[name] = ipa
	}
	deleting := metav1.NewTime(created.Add(time.Hour))
	with("every metadata field", func(ipa *networkingv1.IPAddress) {
		//lint:ignore SA1019 a value stored long ago is decoded too
		ipa.GenerateName, ipa.Namespace, ipa.SelfLink, ipa.Generation = "g-", "ns", "/self", 4
		ipa.DeletionTimestamp, ipa.DeletionGracePeriodSeconds = &deleting, ptr.To[int64](30)
		ipa.Annotations = map[string]string{"a": "1", "b": ""}
		ipa.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "s", UID: "u",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}, {Name: "second"}}
		ipa.Finalizers = []string{"f1", "f2"}
	})
	with("a third label", func(ipa *networkingv1.IPAddress) { ipa.Labels["team"] = "a" })
	with("family alone", func(ipa *networkingv1.IPAddress) { delete(ipa.Labels, ipaddress.LabelManagedBy) })
	with("another manager", func(ipa *networkingv1.IPAddress) { ipa.Labels[ipaddress.LabelManagedBy] = "someone-else" })
	with("an unknown family", func(ipa *networkingv1.IPAddress) { ipa.Labels[ipaddress.LabelIPFamily] = "IPv5" })
	with("no labels, no parent", func(ipa *networkingv1.IPAddress) { ipa.Labels, ipa.Spec.ParentRef = nil, nil })
	with("another label alone", func(ipa *networkingv1.IPAddress) { ipa.Labels = map[string]string{"team": "a"} })
	out := encodeStored(t, networkingv1.GroupName, objs, "every metadata field")
	// Metadata that comes twice is merged: an allocator's labels, then
	// another; another label, then an allocator's.
	allocators := scaleIPAddress(3).Labels
	out["metadata twice, an allocator's labels first"] = withMetadata(t, out["IPv4"], map[string]string{"team": "a"})
	out["metadata twice, an allocator's labels second"] = withMetadata(t, out["another label alone"], allocators)
	return out
}

// withMetadata returns a stored object with a second metadata field,
// holding labels, appended to its raw bytes.
func withMetadata(t testing.TB, data []byte, labels map[string]string) []byte {
	var u runtime.Unknown
	if err := u.Unmarshal(bytes.TrimPrefix(data, []byte(etcdlayout.ProtobufMagic))); err != nil {
		t.Fatal(err)
	}
	meta, err := (&metav1.ObjectMeta{Labels: labels}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u.Raw = protowire.AppendBytes(protowire.AppendTag(u.Raw, 1, protowire.BytesType), meta)
	out, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(etcdlayout.ProtobufMagic), out...)
}

// TestInformerCodecs: each codec's object is what the informer keeps of
// the storage codec's (the Service's slim copy; the IPAddress without
// managedFields, its labels shared when they are an allocator's), through
// both paths the etcd3 store decodes by (a watch's runtime.Decode, a get's
// and a list's decode into an object), for every stored shape, JSON
// included; another kind and bad bytes are decoded, or refused, as the
// storage codec does.
func TestInformerCodecs(t *testing.T) {
	t.Parallel()
	services, ipAddresses := storageCodec(""), storageCodec(networkingv1.GroupName)
	svcCodec, ipCodec := slimServiceCodec(services), compactIPAddressCodec(ipAddresses)
	for name, data := range storedServices(t) {
		t.Run("Service "+name, func(t *testing.T) {
			t.Parallel()
			checkInformerDecode(t, services, svcCodec, data, slim.Service)
		})
	}
	for name, data := range storedIPAddresses(t) {
		t.Run("IPAddress "+name, func(t *testing.T) {
			t.Parallel()
			got := checkInformerDecode(t, ipAddresses, ipCodec, data, slim.IPAddress)
			family := map[string]string{"IPv4": "IPv4", "IPv6": "IPv6"}[name]
			if family != "" && !sameMap(got.Labels, slim.SharedLabels(family)) {
				t.Errorf("an allocator's %s IPAddress holds a label map of its own", family)
			}
			for _, family := range []string{"IPv4", "IPv6"} {
				if l := slim.SharedLabels(family); len(l) != 2 || l[ipaddress.LabelIPFamily] != family {
					t.Fatalf("the shared %s labels were written to: %v", family, l)
				}
			}
		})
	}

	for _, tc := range []struct {
		name        string
		codec, full runtime.Codec
		data        []byte
	}{
		{"an IPAddress to the Services' codec", svcCodec, services, storedIPAddresses(t)["IPv4"]},
		{"a Service to the IPAddresses' codec", ipCodec, ipAddresses, storedServices(t)["full"]},
		{"a truncated Service", svcCodec, services, storedServices(t)["full"][:200]},
		{"a truncated IPAddress", ipCodec, ipAddresses, storedIPAddresses(t)["IPv4"][:100]},
		{"not an object", svcCodec, services, []byte("not an object")},
	} {
		_, fullErr := runtime.Decode(tc.full, tc.data)
		if _, err := runtime.Decode(tc.codec, tc.data); err == nil || fullErr == nil {
			t.Errorf("%s: decoded, error %v; the storage codec's error: %v", tc.name, err, fullErr)
		}
	}
}

// checkInformerDecode fails t unless codec decodes data, both ways, into
// keep of what full decodes, and returns runtime.Decode's object (nil when
// not checked). Data full does not decode as a PT is not checked: codec
// skips the fields the informer drops, and may read what full refuses
// for them.
func checkInformerDecode[T any, PT interface {
	*T
	runtime.Object
}](t *testing.T, full, codec runtime.Codec, data []byte, keep func(PT) PT) PT {
	t.Helper()
	obj, err := runtime.Decode(full, data)
	want, ok := obj.(PT)
	if err != nil || !ok {
		return nil
	}
	got, err := runtime.Decode(codec, data)
	if err != nil {
		t.Fatalf("runtime.Decode: %v", err)
	}
	if diff := cmp.Diff(keep(want), got); diff != "" {
		t.Errorf("runtime.Decode (-kept of the storage codec's +codec's):\n%s", diff)
	}
	// Both into objects hold a name already: a protobuf decode replaces
	// the whole object, a JSON one merges into it, and the codec must do
	// as the storage codec does.
	wantInto, gotInto := PT(new(T)), PT(new(T))
	any(wantInto).(metav1.Object).SetName("left over")
	any(gotInto).(metav1.Object).SetName("left over")
	if err := runtime.DecodeInto(full, data, wantInto); err != nil {
		t.Fatalf("the storage codec's DecodeInto: %v", err)
	}
	if err := runtime.DecodeInto(codec, data, gotInto); err != nil {
		t.Fatalf("DecodeInto: %v", err)
	}
	if diff := cmp.Diff(keep(wantInto), gotInto); diff != "" {
		t.Errorf("DecodeInto (-kept of the storage codec's +codec's):\n%s", diff)
	}
	return got.(PT)
}

// TestInformerCodecsMutated checks both codecs as the fuzz targets do, on
// stored objects with a few bytes changed, dropped or inserted (a fixed
// seed): go test -fuzz runs the targets below slowly in this package (its
// binary holds k8s.io/apiserver, whose coverage counters each run
// compares), so this test is the one that sees many malformed inputs on
// every run; among them, map entries the generated code reads past their
// end, which the codecs must leave to the storage codec.
func TestInformerCodecsMutated(t *testing.T) {
	t.Parallel()
	services, ipAddresses := storageCodec(""), storageCodec(networkingv1.GroupName)
	svcCodec, ipCodec := slimServiceCodec(services), compactIPAddressCodec(ipAddresses)
	seeds := func(m map[string][]byte) [][]byte {
		var out [][]byte
		for _, name := range slices.Sorted(maps.Keys(m)) {
			out = append(out, m[name])
		}
		return out
	}
	svcSeeds, ipSeeds := seeds(storedServices(t)), seeds(storedIPAddresses(t))
	r := rand.New(rand.NewPCG(7, 8))
	for range 60_000 {
		if t.Failed() {
			return
		}
		d := mutate.Bytes(r, svcSeeds)
		checkInformerDecode(t, services, svcCodec, d, slim.Service)
		_, _ = runtime.Decode(svcCodec, d)
		d = mutate.Bytes(r, ipSeeds)
		checkInformerDecode(t, ipAddresses, ipCodec, d, slim.IPAddress)
		_, _ = runtime.Decode(ipCodec, d)
	}
}

// FuzzSlimServiceCodec: for any bytes the storage codec decodes as a
// Service, the codec decodes slim.Service of it; on other bytes it returns
// an error or an object, and never panics.
//
//	go test ./internal/apiserver -run '^$' -fuzz FuzzSlimServiceCodec -fuzztime 30s
func FuzzSlimServiceCodec(f *testing.F) {
	for _, data := range storedServices(f) {
		f.Add(data)
	}
	full := storageCodec("")
	codec := slimServiceCodec(full)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkInformerDecode(t, full, codec, data, slim.Service)
		_, _ = runtime.Decode(codec, data)
	})
}

// FuzzCompactIPAddressCodec: for any bytes the storage codec decodes as an
// IPAddress, the codec decodes it without managedFields, its labels
// compacted; on other bytes it returns an error or an object, and never
// panics.
//
//	go test ./internal/apiserver -run '^$' -fuzz FuzzCompactIPAddressCodec -fuzztime 30s
func FuzzCompactIPAddressCodec(f *testing.F) {
	for _, data := range storedIPAddresses(f) {
		f.Add(data)
	}
	full := storageCodec(networkingv1.GroupName)
	codec := compactIPAddressCodec(full)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkInformerDecode(t, full, codec, data, slim.IPAddress)
		_, _ = runtime.Decode(codec, data)
	})
}

// BenchmarkInformerDecode decodes a stored test/scale Service and IPAddress
// as an informer's watch does, into what the informer keeps: with the
// storage codec and then the transform, and with the informer's codec.
//
//	go test ./internal/apiserver -run '^$' -bench BenchmarkInformerDecode -benchmem
func BenchmarkInformerDecode(b *testing.B) {
	services, ipAddresses := storageCodec(""), storageCodec(networkingv1.GroupName)
	for _, tc := range []struct {
		name         string
		obj          runtime.Object
		full, direct runtime.Codec
	}{
		{"Service", scaleService(7), services, slimServiceCodec(services)},
		{"IPAddress", scaleIPAddress(7), ipAddresses, compactIPAddressCodec(ipAddresses)},
	} {
		data, err := runtime.Encode(tc.full, tc.obj)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/storage-codec+transform", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obj, err := runtime.Decode(tc.full, data)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := informerTransform(obj); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/informer-codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obj, err := runtime.Decode(tc.direct, data)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := informerTransform(obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
