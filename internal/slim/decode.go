package slim

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/protowalk"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// Envelope returns the raw bytes of an object of kind gvk stored as
// protobuf in k8s.io/apimachinery's envelope (runtime.Unknown: type meta,
// raw, content encoding, content type); ok is false for anything else.
func Envelope(data []byte, gvk schema.GroupVersionKind) (raw []byte, ok bool) {
	const magic = etcdlayout.ProtobufMagic
	if len(data) < len(magic) || string(data[:len(magic)]) != magic {
		return nil, false
	}
	b := data[len(magic):]
	var typeMeta []byte
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
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
			return nil, false // a content encoding (compression) the walk does not read
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
		num, typ, v, rest, err := protowalk.Field(b)
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

// DecodeService decodes the protobuf of a v1 Service into its slim
// copy.
func DecodeService(b []byte) (*corev1.Service, error) {
	svc := &corev1.Service{}
	var spec slimSpecFields
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

// decodeSlimMeta decodes the fields of an ObjectMeta that Service
// keeps: name, namespace, uid, resourceVersion, creationTimestamp, labels.
func decodeSlimMeta(m *metav1.ObjectMeta, b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
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
// Service keeps, as views of the bytes until fill.
type slimSpecFields struct {
	typ, clusterIP, trafficPolicy []byte
	clusterIPs                    [][]byte
	healthCheckNodePort           int32
	externalIPs                   bool
	ports                         []corev1.ServicePort // those with a nodePort, slim
}

func (s *slimSpecFields) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return err
		}
		b = rest
		if num == 12 && typ == protowire.VarintType {
			s.healthCheckNodePort = int32(protowalk.Varint(v))
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

// fill sets spec's kept fields as Service sets them, the decode's
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
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil {
			return corev1.ServicePort{}, err
		}
		b = rest
		switch {
		case num == 2 && typ == protowire.BytesType:
			protocol = v
		case num == 5 && typ == protowire.VarintType:
			nodePort = int32(protowalk.Varint(v))
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
