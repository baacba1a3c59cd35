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

// Item is one object of a List: the stored message and where its
// resourceVersion goes, when it is served as stored; else the object
// decoded in full, and once Response has encoded it, its message (Data).
type Item struct {
	Data   []byte
	Object runtime.Object
	// stored is the stored message (etcd's value, not copied) and its
	// resourceVersion, written into the response as one message
	// (Response): no copy of each item is made on the way.
	stored versioned
}

// GetObjectKind implements runtime.Object: an item has no type meta.
func (*Item) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (i *Item) DeepCopyObject() runtime.Object {
	out := &Item{Data: bytes.Clone(i.Data), stored: i.stored}
	out.stored.msg = bytes.Clone(i.stored.msg)
	if i.Object != nil {
		out.Object = i.Object.DeepCopyObject()
	}
	return out
}

// message returns the item's message as a client reads it.
func (i *Item) message() []byte {
	if i.stored.msg != nil {
		return i.stored.appendTo(make([]byte, 0, i.stored.size()))
	}
	return i.Data
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
		if it.Object == nil || it.stored.msg != nil {
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
	for i := range l.Items {
		size += protowire.SizeTag(2) + protowire.SizeBytes(l.Items[i].size())
	}
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, meta)
	for i := range l.Items {
		it := &l.Items[i]
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		if it.stored.msg == nil {
			b = protowire.AppendBytes(b, it.Data)
			continue
		}
		b = protowire.AppendVarint(b, uint64(it.stored.size()))
		b = it.stored.appendTo(b)
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

// size is the length of the item's message as a client reads it.
func (i *Item) size() int {
	if i.stored.msg != nil {
		return i.stored.size()
	}
	return len(i.Data)
}

// versioned is a stored message, an API object's, and the resourceVersion
// its metadata is served with: the field added at the end of the metadata,
// where protobuf's last value wins over one stored (an object is stored
// without it).
type versioned struct {
	msg []byte
	// metaStart and metaEnd bound the metadata field (tag, length, value)
	// in msg; both len(msg) when it has none. metaValue is where its value
	// starts.
	metaStart, metaValue, metaEnd int
	rev                           uint64
}

// withResourceVersion returns a copy of msg, an API object's message, with
// its metadata's resourceVersion set to rev (versionedAt).
func withResourceVersion(msg []byte, rev uint64) ([]byte, bool) {
	v, ok := versionedAt(msg, rev)
	if !ok {
		return nil, false
	}
	return v.appendTo(make([]byte, 0, v.size())), true
}

// versionedAt returns msg, an API object's message, to be served with
// resourceVersion rev. False when msg or its metadata is not well formed,
// or msg gives its metadata twice (which protobuf merges): msg is then
// decoded in full instead.
func versionedAt(msg []byte, rev uint64) (versioned, bool) {
	if msg == nil {
		msg = []byte{} // an Item tells a stored message by a non-nil msg
	}
	v := versioned{msg: msg, metaStart: len(msg), metaValue: len(msg), metaEnd: len(msg), rev: rev}
	seen := false
	for off := 0; off < len(msg); {
		num, typ, val, rest, err := protowalk.Field(msg[off:])
		if err != nil {
			return versioned{}, false
		}
		next := len(msg) - len(rest)
		if num == metadataField {
			if typ != protowire.BytesType || seen {
				return versioned{}, false
			}
			seen = true
			v.metaStart, v.metaValue, v.metaEnd = off, next-len(val), next
		}
		off = next
	}
	// The field is added after the metadata's last: that one must end
	// where the metadata does, or the field would be read into it.
	for b := msg[v.metaValue:v.metaEnd]; len(b) > 0; {
		_, _, _, rest, err := protowalk.Field(b)
		if err != nil {
			return versioned{}, false
		}
		b = rest
	}
	return v, true
}

// version is the resourceVersion's text, as the store's versioner writes
// it: revision 0 is no resourceVersion.
func (v *versioned) version(digits *[20]byte) []byte {
	if v.rev == 0 {
		return digits[:0]
	}
	return strconv.AppendUint(digits[:0], v.rev, 10)
}

// metaSize is the length of the metadata's value once the resourceVersion
// is added.
func (v *versioned) metaSize() int {
	var digits [20]byte
	return v.metaEnd - v.metaValue + protowire.SizeTag(resourceVersionField) + protowire.SizeBytes(len(v.version(&digits)))
}

// size is the length of the message as served.
func (v *versioned) size() int {
	return len(v.msg) - (v.metaEnd - v.metaStart) + protowire.SizeTag(metadataField) + protowire.SizeBytes(v.metaSize())
}

// appendTo appends the message as served to out.
func (v *versioned) appendTo(out []byte) []byte {
	var digits [20]byte
	out = append(out, v.msg[:v.metaStart]...)
	out = protowire.AppendTag(out, metadataField, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(v.metaSize()))
	out = append(out, v.msg[v.metaValue:v.metaEnd]...)
	out = protowire.AppendTag(out, resourceVersionField, protowire.BytesType)
	out = protowire.AppendBytes(out, v.version(&digits))
	return append(out, v.msg[v.metaEnd:]...)
}
