package rawlist

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/etcd3"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// Decoder is a resource's etcd store decoder that reads the items of a
// List as the bytes to serve, and every other object as next does.
type Decoder struct {
	next    etcd3.Decoder
	stored  schema.GroupVersionKind // the kind and version a client reads
	newFunc func() runtime.Object   // a new object of the resource, to decode one in full
	// asStored reports whether a stored message is served as it is; nil
	// for a kind not in storedKinds, whose items are always decoded.
	asStored func(raw []byte) bool
}

var _ etcd3.Decoder = (*Decoder)(nil)

// NewDecoder returns the decoder of a store of kind, whose objects newFunc
// makes; next decodes as the store would without it.
func NewDecoder(next etcd3.Decoder, kind schema.GroupVersionKind, newFunc func() runtime.Object) *Decoder {
	return &Decoder{next: next, stored: kind, newFunc: newFunc, asStored: storedKinds[kind.GroupKind()].asStored}
}

// storedKind is a kind whose stored protobuf a client may read as it is.
type storedKind struct {
	// asStored reports whether a stored message is served as it is.
	asStored func(raw []byte) bool
	// decorated: asStored says false of every object the store's Decorator
	// would change, so that a store with one may serve the kind.
	decorated bool
}

// storedKinds are the kinds served as stored: every IPAddress (no default
// applies to one); a Service whose read defaults change nothing, both the
// decode's and its store's Decorator (servicealloc.ReadsAsStored).
var storedKinds = map[schema.GroupKind]storedKind{
	{Kind: "Service"}: {asStored: servicealloc.ReadsAsStored, decorated: true},
	{Group: networkingv1.GroupName, Kind: "IPAddress"}: {asStored: func([]byte) bool { return true }},
}

// Decode decodes one object as next does.
func (d *Decoder) Decode(value []byte, objPtr runtime.Object, rev int64) error {
	return d.next.Decode(value, objPtr, rev)
}

// DecodeListItem decodes one item of a list: into an Item when the list is
// a List, else as next does. An Item holds the stored message when it is
// served as stored, else the object decoded in full (the decode's defaults
// applied), for Serve to decorate and encode.
func (d *Decoder) DecodeListItem(ctx context.Context, data []byte, rev uint64, newItemFunc func() runtime.Object) (runtime.Object, error) {
	obj := newItemFunc()
	item, ok := obj.(*Item)
	if !ok {
		return d.next.DecodeListItem(ctx, data, rev, func() runtime.Object { return obj })
	}
	if d.asStored != nil {
		if raw, ok := slim.Envelope(data, d.stored); ok && d.asStored(raw) {
			if v, ok := versionedAt(raw, rev); ok {
				item.stored = v
				return item, nil
			}
		}
	}
	full, err := d.next.DecodeListItem(ctx, data, rev, d.newFunc)
	if err != nil {
		return nil, err
	}
	item.Object = full
	return item, nil
}
