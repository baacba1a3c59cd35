package apiserver

import (
	"io"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allocator/allocator/internal/slim"
)

// informerCodec is the codec of the store an informer reads a resource
// from (when the resource has no watch cache): it decodes a stored object
// straight into what the informer keeps of it, reading only the fields
// kept and skipping the rest of the bytes, instead of decoding every field
// and leaving what the informer's transform drops (managedFields above
// all) to the garbage collector. At a start, the informers decode every
// stored Service and IPAddress this way.
//
// What it returns equals keep of what full, the resource's storage codec,
// decodes, the decode's defaults included: slimServiceCodec and
// compactIPAddressCodec, tested against it (TestInformerCodecs,
// FuzzSlimServiceCodec, FuzzCompactIPAddressCodec). Data it does not read
// (JSON, another kind, an encoding it does not know) or does not find well
// formed is decoded by full, then kept as the informer keeps it.
type informerCodec[T any, PT interface {
	*T
	runtime.Object
}] struct {
	full   runtime.Codec
	gvk    schema.GroupVersionKind // the kind it decodes itself
	decode func(raw []byte) (PT, error)
	keep   func(PT) PT // what the informer keeps of a fully decoded object
}

// slimServiceCodec decodes a stored Service into its slim copy
// (slim.Service).
func slimServiceCodec(full runtime.Codec) runtime.Codec {
	return informerCodec[corev1.Service, *corev1.Service]{full: full,
		gvk: corev1.SchemeGroupVersion.WithKind("Service"), decode: slim.DecodeService, keep: slim.Service}
}

// compactIPAddressCodec decodes a stored IPAddress without its
// managedFields, its labels shared when they are an allocator's
// (slim.IPAddress).
func compactIPAddressCodec(full runtime.Codec) runtime.Codec {
	return informerCodec[networkingv1.IPAddress, *networkingv1.IPAddress]{full: full,
		gvk: networkingv1.SchemeGroupVersion.WithKind("IPAddress"), decode: slim.DecodeIPAddress, keep: slim.IPAddress}
}

// Encode encodes with the storage codec: the store on this codec is only
// read.
func (c informerCodec[T, PT]) Encode(obj runtime.Object, w io.Writer) error {
	return c.full.Encode(obj, w)
}

// Identifier names the codec.
func (c informerCodec[T, PT]) Identifier() runtime.Identifier {
	return runtime.Identifier("informer-" + c.gvk.Kind)
}

// Decode decodes a stored object of the codec's kind into what the
// informer keeps of it: into when it is of that kind (the type meta then
// set, as the storage codec sets it when it decodes into an object), else
// a new one (with no type meta, as the storage codec leaves it).
func (c informerCodec[T, PT]) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	target, _ := into.(PT)
	raw, ok := slim.Envelope(data, c.gvk)
	if !ok || (into != nil && target == nil) {
		return c.decodeFull(data, defaults, into, target)
	}
	obj, err := c.decode(raw)
	if err != nil {
		// Bytes the walk refuses, the storage codec decides on: its
		// generated code accepts some that are not well formed (a map
		// entry read past its own length), and an object the informer
		// cannot decode would stop it from ever syncing.
		return c.decodeFull(data, defaults, into, target)
	}
	gvk := c.gvk
	if target == nil {
		return obj, &gvk, nil
	}
	*target = *obj
	target.GetObjectKind().SetGroupVersionKind(gvk)
	return target, &gvk, nil
}

// decodeFull decodes data with the storage codec, then keeps what the
// informer keeps of an object of the codec's kind.
func (c informerCodec[T, PT]) decodeFull(data []byte, defaults *schema.GroupVersionKind, into runtime.Object, target PT) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.full.Decode(data, defaults, into)
	if err != nil {
		return nil, nil, err
	}
	o, ok := obj.(PT)
	if !ok {
		return obj, gvk, nil
	}
	kept := c.keep(o)
	if target == nil {
		return kept, gvk, nil
	}
	*target = *kept
	return target, gvk, nil
}
