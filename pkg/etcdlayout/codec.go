package etcdlayout

import (
	"bytes"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/allocator/allocator/internal/storageversion"
)

// ProtobufMagic starts every protobuf value kube-apiserver stores.
const ProtobufMagic = "k8s\x00"

// encryptedPrefix starts values encrypted at rest by kube-apiserver.
const encryptedPrefix = "k8s:enc:"

// Kinds of the objects this package is about.
var (
	KindRangeAllocation = corev1.SchemeGroupVersion.WithKind("RangeAllocation")
	KindService         = corev1.SchemeGroupVersion.WithKind("Service")
	KindNamespace       = corev1.SchemeGroupVersion.WithKind("Namespace")
	KindIPAddress       = networkingv1.SchemeGroupVersion.WithKind("IPAddress")
	KindServiceCIDR     = networkingv1.SchemeGroupVersion.WithKind("ServiceCIDR")
)

// ErrEncrypted means a value is encrypted at rest ("k8s:enc:..."): it can
// only be read with the kube-apiserver's encryption configuration.
var ErrEncrypted = errors.New("value is encrypted at rest (prefix \"k8s:enc:\")")

// KindMismatchError is returned by the typed decoders when the value holds
// another kind of object.
type KindMismatchError struct {
	Want, Got schema.GroupVersionKind
}

func (e *KindMismatchError) Error() string {
	return fmt.Sprintf("value is %s, want %s", gvkString(e.Got), gvkString(e.Want))
}

// KeyError adds the etcd key to an encode or decode error.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("etcd key %q: %v", e.Key, e.Err) }

func (e *KeyError) Unwrap() error { return e.Err }

// WithKey returns err annotated with the etcd key it is about; nil stays nil.
func WithKey(key string, err error) error {
	if err == nil {
		return nil
	}
	return &KeyError{Key: key, Err: err}
}

// codec is immutable after initialisation.
type codec struct {
	scheme *runtime.Scheme
	proto  *protobuf.Serializer
	json   *json.Serializer
}

var defaultCodec = newCodec()

func newCodec() *codec {
	scheme := runtime.NewScheme()
	// Only fails on conflicting registrations, which is a programming error.
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("etcdlayout: register core/v1: %v", err))
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("etcdlayout: register networking.k8s.io/v1: %v", err))
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("etcdlayout: register coordination.k8s.io/v1: %v", err))
	}
	if err := storageversion.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("etcdlayout: register networking.k8s.io/v1beta1: %v", err))
	}
	return &codec{
		scheme: scheme,
		proto:  protobuf.NewSerializer(scheme, scheme),
		json:   json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{}),
	}
}

// Encode returns the value kube-apiserver stores for obj: ProtobufMagic and a
// runtime.Unknown envelope. obj is not modified.
func Encode(obj runtime.Object) ([]byte, error) {
	b, err := defaultCodec.encode(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	return b, nil
}

func (c *codec) encode(obj runtime.Object) ([]byte, error) {
	if obj == nil {
		return nil, errors.New("nil object")
	}
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	gvk := gvks[0]
	if set := obj.GetObjectKind().GroupVersionKind(); !set.Empty() {
		found := false
		for _, k := range gvks {
			found = found || k == set
		}
		if !found {
			return nil, fmt.Errorf("object says it is %s, but its type is %s", gvkString(set), gvkString(gvk))
		}
		gvk = set
	}
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	// kube-apiserver's storage clears these before every write
	// (APIObjectVersioner.PrepareObjectForStorage): the resource version is
	// etcd's mod_revision, never part of the value.
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion("")
		m.SetSelfLink("")
	}
	// kube-apiserver always writes the data field (from big.Int.Bytes(),
	// which is never nil); gogo protobuf omits a nil []byte.
	if ra, ok := obj.(*corev1.RangeAllocation); ok && ra.Data == nil {
		ra.Data = []byte{}
	}
	var buf bytes.Buffer
	if err := c.proto.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode reads a value written by kube-apiserver, protobuf or JSON, into a
// typed object with apiVersion and kind set.
func Decode(data []byte) (runtime.Object, error) {
	obj, err := defaultCodec.decode(data)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return obj, nil
}

func (c *codec) decode(data []byte) (runtime.Object, error) {
	switch {
	case len(data) == 0:
		return nil, errors.New("empty value")
	case bytes.HasPrefix(data, []byte(encryptedPrefix)):
		return nil, ErrEncrypted
	case bytes.HasPrefix(data, []byte(ProtobufMagic)):
		if len(data) == len(ProtobufMagic) {
			return nil, errors.New("protobuf envelope: nothing after the magic")
		}
		obj, gvk, err := c.proto.Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("protobuf envelope (%d bytes): %w", len(data), err)
		}
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
		return obj, nil
	case len(data) < len(ProtobufMagic) && bytes.HasPrefix([]byte(ProtobufMagic), data):
		return nil, fmt.Errorf("truncated protobuf envelope: %d bytes, shorter than the magic %q", len(data), ProtobufMagic)
	case firstNonSpace(data) == '{':
		obj, gvk, err := c.json.Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("JSON value: %w", err)
		}
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
		return obj, nil
	default:
		n := min(len(data), 8)
		return nil, fmt.Errorf("value is neither protobuf (magic %q) nor JSON: starts with % x", ProtobufMagic, data[:n])
	}
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Empty() {
		return "an object without apiVersion/kind"
	}
	return gvk.GroupVersion().String() + "/" + gvk.Kind
}

// decodeAs decodes data and checks it holds a T of kind want.
func decodeAs[T runtime.Object](data []byte, want schema.GroupVersionKind) (T, error) {
	var zero T
	obj, err := defaultCodec.decode(data)
	if err != nil {
		return zero, fmt.Errorf("decode %s: %w", want.Kind, err)
	}
	t, ok := obj.(T)
	if got := obj.GetObjectKind().GroupVersionKind(); !ok || got != want {
		return zero, fmt.Errorf("decode %s: %w", want.Kind, &KindMismatchError{Want: want, Got: got})
	}
	return t, nil
}

// DecodeRangeAllocation decodes a v1 RangeAllocation (a bitmap key's value).
func DecodeRangeAllocation(data []byte) (*corev1.RangeAllocation, error) {
	return decodeAs[*corev1.RangeAllocation](data, KindRangeAllocation)
}

// DecodeService decodes a v1 Service.
func DecodeService(data []byte) (*corev1.Service, error) {
	return decodeAs[*corev1.Service](data, KindService)
}

// DecodeNamespace decodes a v1 Namespace.
func DecodeNamespace(data []byte) (*corev1.Namespace, error) {
	return decodeAs[*corev1.Namespace](data, KindNamespace)
}

// DecodeIPAddress decodes an IPAddress stored as networking.k8s.io/v1, or
// as v1beta1 (kube-apiserver 1.31–1.33), converted to v1.
func DecodeIPAddress(data []byte) (*networkingv1.IPAddress, error) {
	return decodeConverted[*networkingv1.IPAddress](data, KindIPAddress, &networkingv1.IPAddress{})
}

// DecodeLease decodes a coordination.k8s.io/v1 Lease (kube-apiserver's
// identity leases live at <prefix>/leases/kube-system/apiserver-<hash>).
func DecodeLease(data []byte) (*coordinationv1.Lease, error) {
	return decodeAs[*coordinationv1.Lease](data, coordinationv1.SchemeGroupVersion.WithKind("Lease"))
}

// DecodeServiceCIDR decodes a ServiceCIDR stored as networking.k8s.io/v1,
// or as v1beta1 (kube-apiserver 1.31–1.33), converted to v1.
func DecodeServiceCIDR(data []byte) (*networkingv1.ServiceCIDR, error) {
	return decodeConverted[*networkingv1.ServiceCIDR](data, KindServiceCIDR, &networkingv1.ServiceCIDR{})
}

// decodeConverted is decodeAs for a kind that may also be stored in an
// older version (storageversion.NetworkingV1beta1): such a value is
// converted into out, which gets want as its apiVersion/kind.
func decodeConverted[T runtime.Object](data []byte, want schema.GroupVersionKind, out T) (T, error) {
	var zero T
	obj, err := defaultCodec.decode(data)
	if err != nil {
		return zero, fmt.Errorf("decode %s: %w", want.Kind, err)
	}
	got := obj.GetObjectKind().GroupVersionKind()
	switch {
	case got == want:
		if t, ok := obj.(T); ok {
			return t, nil
		}
	case got == storageversion.NetworkingV1beta1.WithKind(want.Kind):
		if err := defaultCodec.scheme.Convert(obj, out, nil); err != nil {
			return zero, fmt.Errorf("decode %s: convert from %s: %w", want.Kind, gvkString(got), err)
		}
		out.GetObjectKind().SetGroupVersionKind(want)
		return out, nil
	}
	return zero, fmt.Errorf("decode %s: %w", want.Kind, &KindMismatchError{Want: want, Got: got})
}

// EncodeRangeAllocation returns the value kube-apiserver writes for a bitmap:
// a RangeAllocation with empty metadata, the range (a CIDR such as
// "10.96.0.0/16", or "30000-32767" for NodePorts) and the bitmap bytes
// (big-endian, no leading zero bytes; empty when nothing is allocated).
// Leading zero bytes in data are dropped: they do not change the bitmap, and
// kube-apiserver never writes them.
func EncodeRangeAllocation(rangeSpec string, data []byte) ([]byte, error) {
	data = bytes.TrimLeft(data, "\x00")
	b, err := defaultCodec.encode(&corev1.RangeAllocation{Range: rangeSpec, Data: data})
	if err != nil {
		return nil, fmt.Errorf("encode RangeAllocation %s: %w", rangeSpec, err)
	}
	return b, nil
}
