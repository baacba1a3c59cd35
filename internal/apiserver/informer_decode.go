package apiserver

import (
	"bytes"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
// (slimService).
func slimServiceCodec(full runtime.Codec) runtime.Codec {
	return informerCodec[corev1.Service, *corev1.Service]{full: full,
		gvk: corev1.SchemeGroupVersion.WithKind("Service"), decode: decodeSlimService, keep: slimService}
}

// compactIPAddressCodec decodes a stored IPAddress without its
// managedFields, its labels shared when they are an allocator's
// (compactIPAddress).
func compactIPAddressCodec(full runtime.Codec) runtime.Codec {
	return informerCodec[networkingv1.IPAddress, *networkingv1.IPAddress]{full: full,
		gvk: networkingv1.SchemeGroupVersion.WithKind("IPAddress"), decode: decodeCompactIPAddress,
		keep: func(ipa *networkingv1.IPAddress) *networkingv1.IPAddress {
			ipa.ManagedFields = nil
			compactIPAddress(ipa)
			return ipa
		}}
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
	raw, ok := envelope(data, c.gvk)
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

// protobufMagic starts every object k8s.io/apimachinery's protobuf
// serializer writes.
var protobufMagic = []byte("k8s\x00")

// envelope returns the raw bytes of an object of kind gvk stored as
// protobuf in k8s.io/apimachinery's envelope (runtime.Unknown: type meta,
// raw, content encoding, content type); ok is false for anything else.
func envelope(data []byte, gvk schema.GroupVersionKind) (raw []byte, ok bool) {
	b, found := bytes.CutPrefix(data, protobufMagic)
	if !found {
		return nil, false
	}
	var typeMeta []byte
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			typeMeta = v
		case num == 2 && typ == protowire.BytesType:
			raw = v
		case num == 3 && typ == protowire.BytesType && len(v) > 0:
			return nil, false // a content encoding (compression) this codec does not read
		}
	}
	apiVersion, kind, err := decodeTypeMeta(typeMeta)
	if err != nil || string(apiVersion) != gvk.GroupVersion().String() || string(kind) != gvk.Kind {
		return nil, false
	}
	return raw, true
}

// decodeTypeMeta returns a runtime.TypeMeta's apiVersion and kind, as
// views of b: valid only while b is.
func decodeTypeMeta(b []byte) (apiVersion, kind []byte, err error) {
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return nil, nil, err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			apiVersion = v
		case 2:
			kind = v
		}
	}
	return apiVersion, kind, nil
}

// decodeSlimService decodes the protobuf of a v1 Service into its slim
// copy.
func decodeSlimService(b []byte) (*corev1.Service, error) {
	svc := &corev1.Service{}
	var spec slimSpecFields
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			if err := decodeSlimMeta(&svc.ObjectMeta, v); err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
		case 2:
			if err := spec.decode(v); err != nil {
				return nil, fmt.Errorf("spec: %w", err)
			}
		}
	}
	spec.fill(&svc.Spec)
	return svc, nil
}

// decodeSlimMeta decodes the fields of an ObjectMeta that slimService
// keeps: name, namespace, uid, resourceVersion, creationTimestamp, labels.
func decodeSlimMeta(m *metav1.ObjectMeta, b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return err
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 8:
			if err := m.CreationTimestamp.Unmarshal(v); err != nil {
				return fmt.Errorf("creationTimestamp: %w", err)
			}
		case 11:
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			k, val, err := decodeMapEntry(v)
			if err != nil {
				return fmt.Errorf("labels: %w", err)
			}
			m.Labels[k] = val
		}
	}
	return nil
}

// decodeMapEntry decodes one entry of a map<string, string>.
func decodeMapEntry(b []byte) (key, value string, err error) {
	k, v, err := decodeMapEntryBytes(b)
	return string(k), string(v), err
}

// slimSpecFields are what a ServiceSpec's bytes hold of the fields
// slimService keeps, as views of the bytes until fill.
type slimSpecFields struct {
	typ, clusterIP, trafficPolicy []byte
	clusterIPs                    [][]byte
	healthCheckNodePort           int32
	externalIPs                   bool
	ports                         []corev1.ServicePort // those with a nodePort, slim
}

func (s *slimSpecFields) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return err
		}
		b = rest
		if num == 12 && typ == protowire.VarintType {
			s.healthCheckNodePort = int32(varintValue(v))
			continue
		}
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			p, err := decodeSlimPort(v)
			if err != nil {
				return fmt.Errorf("ports: %w", err)
			}
			if p.NodePort != 0 {
				s.ports = append(s.ports, p)
			}
		case 3:
			s.clusterIP = v
		case 4:
			s.typ = v
		case 5:
			s.externalIPs = true
		case 11:
			s.trafficPolicy = v
		case 18:
			s.clusterIPs = append(s.clusterIPs, v)
		}
	}
	return nil
}

// fill sets spec's kept fields as slimService sets them, the decode's
// defaults applied.
func (s *slimSpecFields) fill(spec *corev1.ServiceSpec) {
	spec.Type = corev1.ServiceType(knownBytes(s.typ, corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName))
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	spec.ClusterIP = knownBytes(s.clusterIP, corev1.ClusterIPNone)
	if len(s.clusterIPs) > 0 {
		spec.ClusterIPs = make([]string, len(s.clusterIPs))
		for i, ip := range s.clusterIPs {
			if string(ip) == spec.ClusterIP {
				spec.ClusterIPs[i] = spec.ClusterIP // one string for the primary address
			} else {
				spec.ClusterIPs[i] = string(ip)
			}
		}
	}
	spec.HealthCheckNodePort = s.healthCheckNodePort
	spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(knownBytes(s.trafficPolicy,
		corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal))
	reachable := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer ||
		spec.Type == corev1.ServiceTypeClusterIP && s.externalIPs
	if reachable && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	spec.Ports = s.ports
}

// decodeSlimPort decodes a ServicePort's protocol (TCP when unset) and
// nodePort.
func decodeSlimPort(b []byte) (corev1.ServicePort, error) {
	var protocol []byte
	var nodePort int32
	for len(b) > 0 {
		num, typ, v, rest, err := consumeField(b)
		if err != nil {
			return corev1.ServicePort{}, err
		}
		b = rest
		switch {
		case num == 2 && typ == protowire.BytesType:
			protocol = v
		case num == 5 && typ == protowire.VarintType:
			nodePort = int32(varintValue(v))
		}
	}
	p := corev1.ServicePort{NodePort: nodePort}
	if nodePort != 0 {
		p.Protocol = corev1.Protocol(knownBytes(protocol, corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP))
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
	}
	return p, nil
}

// consumeField reads one field of b: its number, its wire type, its value
// (a length-delimited field's bytes, a varint's own encoding, as a view of
// b) and what follows it.
func consumeField(b []byte) (protowire.Number, protowire.Type, []byte, []byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, 0, nil, nil, protowire.ParseError(n)
		}
		return num, typ, v, b[n:], nil
	}
	n = protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	return num, typ, b[:n], b[n:], nil
}

// varintValue is the value of a varint field's encoding (consumeField's
// value of a VarintType field).
func varintValue(b []byte) uint64 {
	v, _ := protowire.ConsumeVarint(b)
	return v
}

// knownBytes returns the constant among values that b spells, else b as a
// string of its own: each string decoded from protobuf is an allocation of
// its own, a constant none.
func knownBytes[T ~string](b []byte, values ...T) string {
	for _, v := range values {
		if string(b) == string(v) {
			return string(v)
		}
	}
	return string(b)
}
