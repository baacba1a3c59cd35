package slim

import (
	"github.com/allocator/allocator/internal/protowalk"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The list kinds an API server answers a LIST of Services or IPAddresses
// with.
var (
	serviceListKind   = corev1.SchemeGroupVersion.WithKind("ServiceList")
	ipAddressListKind = networkingv1.SchemeGroupVersion.WithKind("IPAddressList")
)

// DecodeServiceList decodes a v1 ServiceList as an API server sends it in
// protobuf (the envelope, then the list) into the slim copy of each
// Service and the list's metadata, reading only what the copies keep: each
// is what Service makes of the item, with the defaults an API server has
// applied to every item it serves (DecodeService). ok is false for bytes
// the walk does not read (JSON, another kind, a compressed envelope,
// anything not well formed), which the caller decodes in full.
func DecodeServiceList(data []byte) (items []*corev1.Service, meta metav1.ListMeta, ok bool) {
	return decodeList(data, serviceListKind, DecodeService)
}

// DecodeIPAddressList decodes a v1 IPAddressList as an API server sends it
// in protobuf into each IPAddress as IPAddress makes it (no managedFields,
// an allocator's labels shared) and the list's metadata; ok as
// DecodeServiceList's.
func DecodeIPAddressList(data []byte) (items []*networkingv1.IPAddress, meta metav1.ListMeta, ok bool) {
	return decodeList(data, ipAddressListKind, DecodeIPAddress)
}

// decodeList walks a list of kind gvk in its envelope: field 1 its
// ListMeta, field 2 each item, decoded by item. Nothing it returns is a
// view of data.
func decodeList[T any](data []byte, gvk schema.GroupVersionKind, item func([]byte) (T, error)) ([]T, metav1.ListMeta, bool) {
	var meta metav1.ListMeta
	raw, ok := Envelope(data, gvk)
	if !ok {
		return nil, meta, false
	}
	var items []T
	for b := raw; len(b) > 0; {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return nil, metav1.ListMeta{}, false
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			if err := meta.Unmarshal(v); err != nil {
				return nil, metav1.ListMeta{}, false
			}
		case 2:
			it, err := item(v)
			if err != nil {
				return nil, metav1.ListMeta{}, false
			}
			items = append(items, it)
		}
	}
	return items, meta, true
}
