package rawlist

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// storageCodecs are a protobuf and a JSON codec of v1 objects that decode
// with the decode's defaults, as a server's storage codec does.
func storageCodecs(t testing.TB) (pb, js runtime.Codec) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddTypeDefaultingFunc(&corev1.Service{}, func(obj any) { servicealloc.DefaultService(obj.(*corev1.Service)) })
	codecs := serializer.NewCodecFactory(scheme)
	v1 := corev1.SchemeGroupVersion
	pb = codecs.CodecForVersions(protobuf.NewSerializer(scheme, scheme), codecs.UniversalDeserializer(), v1, v1)
	js = codecs.CodecForVersions(json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{}),
		codecs.UniversalDeserializer(), v1, v1)
	return pb, js
}

func encode(t testing.TB, codec runtime.Codec, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := codec.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newService() runtime.Object { return &corev1.Service{} }
func newItem() runtime.Object    { return &Item{} }

func TestDecodeListItem(t *testing.T) {
	t.Parallel()
	pb, js := storageCodecs(t)
	d := NewDecoder(etcd3.NewDefaultDecoder(pb, storage.APIObjectVersioner{}), corev1.SchemeGroupVersion.WithKind("Service"), newService)
	ctx := context.Background()
	written := testService("written")
	old := testService("old")
	old.Spec.InternalTrafficPolicy = nil // stored before the field existed

	// A typed list's item is decoded as the store would.
	obj, err := d.DecodeListItem(ctx, encode(t, pb, written), 7, newService)
	if svc, ok := obj.(*corev1.Service); err != nil || !ok || svc.Name != "written" || svc.ResourceVersion != "7" {
		t.Fatalf("a typed item: %#v, %v", obj, err)
	}

	cases := []struct {
		name   string
		data   []byte
		stored bool // served as stored: the stored message, not Object
	}{
		{"protobuf as a server writes it", encode(t, pb, written), true},
		{"protobuf without a default", encode(t, pb, old), false},
		{"JSON", encode(t, js, written), false},
	}
	for _, tc := range cases {
		obj, err := d.DecodeListItem(ctx, tc.data, 9, newItem)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		item := obj.(*Item)
		if (item.stored.msg != nil) != tc.stored || (item.Object != nil) == tc.stored || item.Data != nil {
			t.Fatalf("%s: stored %d bytes, data %d bytes, object %T; want served as stored: %v",
				tc.name, len(item.stored.msg), len(item.Data), item.Object, tc.stored)
		}
		var got *corev1.Service
		if tc.stored {
			got = &corev1.Service{}
			if err := got.Unmarshal(item.message()); err != nil {
				t.Fatal(err)
			}
		} else {
			got = item.Object.(*corev1.Service)
		}
		if got.ResourceVersion != "9" || got.Spec.InternalTrafficPolicy == nil {
			t.Errorf("%s: resourceVersion %q, internalTrafficPolicy %v: want 9, the default", tc.name, got.ResourceVersion, got.Spec.InternalTrafficPolicy)
		}
	}

	// A kind not served as stored is always decoded.
	ns := NewDecoder(etcd3.NewDefaultDecoder(pb, storage.APIObjectVersioner{}), corev1.SchemeGroupVersion.WithKind("Namespace"),
		func() runtime.Object { return &corev1.Namespace{} })
	obj, err = ns.DecodeListItem(ctx, encode(t, pb, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}}), 3, newItem)
	if item, ok := obj.(*Item); err != nil || !ok || item.stored.msg != nil || item.Object == nil {
		t.Errorf("a Namespace: %#v, %v; want it decoded", obj, err)
	}
}

// BenchmarkListItems: the server's work for a page of stored Services,
// from etcd's values to the response's bytes (gzip and HTTP aside), served
// as stored against decoded and encoded as usual.
func BenchmarkListItems(b *testing.B) {
	pb, _ := storageCodecs(b)
	const n = 10_000
	values := make([][]byte, n)
	for i := range values {
		values[i] = encode(b, pb, testService(fmt.Sprintf("svc-%05d", i)))
	}
	d := NewDecoder(etcd3.NewDefaultDecoder(pb, storage.APIObjectVersioner{}), corev1.SchemeGroupVersion.WithKind("Service"), newService)
	ctx := context.Background()
	b.Run("stored", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			list := &List{Items: make([]Item, 0, n)}
			for i, v := range values {
				obj, err := d.DecodeListItem(ctx, v, uint64(i+1), newItem)
				if err != nil {
					b.Fatal(err)
				}
				list.Items = append(list.Items, *obj.(*Item))
			}
			resp, err := list.Response(corev1.SchemeGroupVersion.WithKind("ServiceList"), nil)
			if err != nil {
				b.Fatal(err)
			}
			encode(b, pb, resp)
		}
	})
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			list := &corev1.ServiceList{Items: make([]corev1.Service, 0, n)}
			for i, v := range values {
				obj, err := d.DecodeListItem(ctx, v, uint64(i+1), newService)
				if err != nil {
					b.Fatal(err)
				}
				list.Items = append(list.Items, *obj.(*corev1.Service))
			}
			encode(b, pb, list)
		}
	})
}
