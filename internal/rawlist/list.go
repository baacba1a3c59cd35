package rawlist

import (
	"bytes"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allocator/allocator/internal/protowalk"
)

// Item is one object of a List: its protobuf message as a client reads it,
// resourceVersion set, or, when it is not served as stored, the object
// decoded in full.
type Item struct {
	Data   []byte
	Object runtime.Object
}

// GetObjectKind implements runtime.Object: an item has no type meta.
func (*Item) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (i *Item) DeepCopyObject() runtime.Object {
	out := &Item{Data: bytes.Clone(i.Data)}
	if i.Object != nil {
		out.Object = i.Object.DeepCopyObject()
	}
	return out
}

// List is what a resource's etcd store reads a list into when its items
// are to be served as stored: the list metadata as the store sets it, and
// each item's bytes (Decoder).
type List struct {
	metav1.ListMeta
	Items []Item
}

// GetObjectKind implements runtime.Object: the list's kind is given to
// Response.
func (*List) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (l *List) DeepCopyObject() runtime.Object {
	out := &List{Items: make([]Item, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Item)
	}
	return out
}

// Response returns l as a list of kind (ServiceList, IPAddressList) in
// the protobuf envelope's message: the list's metadata as field 1, each
// item as field 2, as the generated encoding of the typed list writes
// them. The API's protobuf serializer writes it as it is. An item decoded
// in full is passed to decorate (the store's Decorator; nil: none) and
// encoded.
func (l *List) Response(kind schema.GroupVersionKind, decorate func(runtime.Object)) (*runtime.Unknown, error) {
	for i := range l.Items {
		it := &l.Items[i]
		if it.Object == nil {
			continue
		}
		if decorate != nil {
			decorate(it.Object)
		}
		m, ok := it.Object.(interface{ Marshal() ([]byte, error) })
		if !ok {
			return nil, fmt.Errorf("serve a %s as protobuf: %T has no protobuf encoding", kind.Kind, it.Object)
		}
		data, err := m.Marshal()
		if err != nil {
			return nil, fmt.Errorf("encode an item of a %s: %w", kind.Kind, err)
		}
		it.Data, it.Object = data, nil
	}
	meta, err := l.ListMeta.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode the list's metadata: %w", err)
	}
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(meta))
	for _, it := range l.Items {
		size += protowire.SizeTag(2) + protowire.SizeBytes(len(it.Data))
	}
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, meta)
	for _, it := range l.Items {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, it.Data)
	}
	return &runtime.Unknown{
		TypeMeta: runtime.TypeMeta{APIVersion: kind.GroupVersion().String(), Kind: kind.Kind},
		Raw:      b,
	}, nil
}

// Field numbers of an object's metadata (an ObjectMeta, field 1 of every
// top-level API object) and of its resourceVersion.
const (
	metadataField        = 1
	resourceVersionField = 6
)

// withResourceVersion returns a copy of msg, an API object's message, with
// its metadata's resourceVersion set to rev: the field added at the end of
// the metadata, where protobuf's last value wins over one stored (an
// object is stored without it). False when msg or its metadata is not
// well formed, or msg gives its metadata twice (which protobuf merges): msg
// is then decoded in full instead.
func withResourceVersion(msg []byte, rev uint64) ([]byte, bool) {
	metaStart, metaEnd := -1, -1
	var meta []byte
	for off := 0; off < len(msg); {
		num, typ, v, rest, err := protowalk.Field(msg[off:])
		if err != nil {
			return nil, false
		}
		next := len(msg) - len(rest)
		if num == metadataField {
			if typ != protowire.BytesType || metaStart >= 0 {
				return nil, false
			}
			metaStart, metaEnd, meta = off, next, v
		}
		off = next
	}
	// The field is added after the metadata's last: that one must end
	// where the metadata does, or the field would be read into it.
	for b := meta; len(b) > 0; {
		_, _, _, rest, err := protowalk.Field(b)
		if err != nil {
			return nil, false
		}
		b = rest
	}
	// As the store's versioner: revision 0 is no resourceVersion.
	var digits [20]byte
	version := digits[:0]
	if rev != 0 {
		version = strconv.AppendUint(version, rev, 10)
	}
	rvSize := protowire.SizeTag(resourceVersionField) + protowire.SizeBytes(len(version))
	if metaStart < 0 {
		metaStart, metaEnd = len(msg), len(msg)
	}
	metaSize := len(meta) + rvSize
	out := make([]byte, 0, len(msg)-(metaEnd-metaStart)+protowire.SizeTag(metadataField)+protowire.SizeBytes(metaSize))
	out = append(out, msg[:metaStart]...)
	out = protowire.AppendTag(out, metadataField, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(metaSize))
	out = append(out, meta...)
	out = protowire.AppendTag(out, resourceVersionField, protowire.BytesType)
	out = protowire.AppendBytes(out, version)
	return append(out, msg[metaEnd:]...), true
}
