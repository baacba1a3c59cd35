package slim

import (
	"errors"
	"fmt"
	"maps"

	"google.golang.org/protobuf/encoding/protowire"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/protowalk"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// DecodeIPAddress decodes the protobuf of a v1 IPAddress as the
// IPAddress informer keeps it (IPAddress): every field but managedFields
// and the Service UID annotation, its labels the shared map of its family
// when they are an allocator's two (CompactIPAddress), so that nothing is
// decoded only to be dropped.
func DecodeIPAddress(b []byte) (*networkingv1.IPAddress, error) {
	ipa := &networkingv1.IPAddress{}
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			if err := decodeMetaWithoutManagedFields(&ipa.ObjectMeta, v); err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
		case 2:
			if err := decodeIPAddressSpec(&ipa.Spec, v); err != nil {
				return nil, fmt.Errorf("spec: %w", err)
			}
		}
	}
	return ipa, nil
}

// decodeMetaWithoutManagedFields decodes every field of an ObjectMeta but
// managedFields. Labels that are exactly an allocator's two become the
// shared map of their family, never decoded into a map of their own.
func decodeMetaWithoutManagedFields(m *metav1.ObjectMeta, b []byte) error {
	var labels [][]byte // the labels' entries, decoded at the end
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return err
		}
		b = rest
		if typ == protowire.VarintType {
			switch num {
			case 7:
				m.Generation = int64(protowalk.Varint(v))
			case 10:
				seconds := int64(protowalk.Varint(v))
				m.DeletionGracePeriodSeconds = &seconds
			}
			continue
		}
		if typ != protowire.BytesType {
			continue
		}
		if err := decodeMetaBytesField(m, num, v, &labels); err != nil {
			return err
		}
	}
	return setLabels(m, labels)
}

// decodeMetaBytesField decodes an ObjectMeta's length-delimited field num;
// a label's entry is appended to labels.
func decodeMetaBytesField(m *metav1.ObjectMeta, num protowire.Number, v []byte, labels *[][]byte) error {
	switch num {
	case 1:
		m.Name = string(v)
	case 2:
		m.GenerateName = string(v)
	case 3:
		m.Namespace = string(v)
	case 4:
		//lint:ignore SA1019 decoded as the generated code decodes it: a value stored long ago is kept
		m.SelfLink = string(v)
	case 5:
		m.UID = types.UID(v)
	case 6:
		m.ResourceVersion = string(v)
	case 8:
		if err := m.CreationTimestamp.Unmarshal(v); err != nil {
			return fmt.Errorf("creationTimestamp: %w", err)
		}
	case 9:
		if m.DeletionTimestamp == nil {
			m.DeletionTimestamp = &metav1.Time{}
		}
		if err := m.DeletionTimestamp.Unmarshal(v); err != nil {
			return fmt.Errorf("deletionTimestamp: %w", err)
		}
	case 11:
		*labels = append(*labels, v)
	case 12:
		k, val, err := decodeMapEntryBytes(v)
		if err != nil {
			return fmt.Errorf("annotations: %w", err)
		}
		if string(k) == ipaddress.AnnotationServiceUID {
			return nil // not kept (IPAddress)
		}
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[string(k)] = string(val)
	case 13:
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{})
		if err := m.OwnerReferences[len(m.OwnerReferences)-1].Unmarshal(v); err != nil {
			return fmt.Errorf("ownerReferences: %w", err)
		}
	case 14:
		m.Finalizers = append(m.Finalizers, string(v))
	}
	return nil
}

// setLabels sets m's labels from their entries, added to those m has
// already (metadata may come twice, and is then merged): the shared map of
// a family when they are an allocator's two and m has none, else a map of
// its own.
func setLabels(m *metav1.ObjectMeta, entries [][]byte) error {
	if len(entries) == 0 {
		return nil
	}
	if len(entries) == 2 && len(m.Labels) == 0 {
		k0, v0, err0 := decodeMapEntryBytes(entries[0])
		k1, v1, err1 := decodeMapEntryBytes(entries[1])
		if err0 == nil && err1 == nil {
			if string(k0) == ipaddress.LabelManagedBy {
				k0, v0, k1, v1 = k1, v1, k0, v0
			}
			if string(k0) == ipaddress.LabelIPFamily && string(k1) == ipaddress.LabelManagedBy && string(v1) == ipaddress.ManagedBy {
				if shared, ok := sharedIPAddressLabels[string(v0)]; ok {
					m.Labels = shared
					return nil
				}
			}
		}
	}
	// A map of its own, even when metadata came twice and the first left
	// a shared map: nothing may write to one.
	own := make(map[string]string, len(m.Labels)+len(entries))
	maps.Copy(own, m.Labels)
	m.Labels = own
	for _, e := range entries {
		k, v, err := decodeMapEntry(e)
		if err != nil {
			return fmt.Errorf("labels: %w", err)
		}
		m.Labels[k] = v
	}
	return nil
}

// errMapEntry is a map entry the walk does not read, left to the full
// decode (the API server's storage codec, etcdlayout's): its generated
// code reads a key or value field of any wire type as length-delimited,
// and past the entry's own end.
var errMapEntry = errors.New("a map entry with a field other than a string key and value")

// decodeMapEntryBytes decodes one entry of a map<string, string> as views
// of b. It reads only entries made of length-delimited fields 1 and 2,
// within the entry: the generated code reads those as this does.
func decodeMapEntryBytes(b []byte) (key, value []byte, err error) {
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return nil, nil, err
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			key = v
		case num == 2 && typ == protowire.BytesType:
			value = v
		default:
			return nil, nil, errMapEntry
		}
	}
	return key, value, nil
}

// decodeIPAddressSpec decodes an IPAddressSpec as its generated code does,
// the parentRef's resource of a Service's address as a constant;
// what the walk does not read (a field of another wire type, a spec that
// comes twice and merges) is left to the generated code.
func decodeIPAddressSpec(spec *networkingv1.IPAddressSpec, b []byte) error {
	if spec.ParentRef != nil {
		return spec.Unmarshal(b)
	}
	var ref *networkingv1.ParentReference
	for rest := b; len(rest) > 0; {
		num, typ, v, next, err := protowalk.Field(rest)
		if err != nil || (num == 1 && (typ != protowire.BytesType || ref != nil)) {
			return spec.Unmarshal(b)
		}
		rest = next
		if num != 1 {
			continue
		}
		if ref, err = decodeParentRef(v); err != nil {
			return spec.Unmarshal(b)
		}
	}
	spec.ParentRef = ref
	return nil
}

// errParentRef is a parentRef field the walk does not read.
var errParentRef = errors.New("a parentRef field of another wire type")

// decodeParentRef decodes a ParentReference: its four string fields, the
// last of each winning, as in the generated code.
func decodeParentRef(b []byte) (*networkingv1.ParentReference, error) {
	ref := &networkingv1.ParentReference{}
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if num < 1 || num > 4 {
			continue
		}
		if typ != protowire.BytesType {
			return nil, errParentRef
		}
		switch num {
		case 1:
			ref.Group = string(v) // a Service's is empty: no allocation
		case 2:
			ref.Resource = knownBytes(v, "services")
		case 3:
			ref.Namespace = string(v)
		case 4:
			ref.Name = string(v)
		}
	}
	return ref, nil
}
