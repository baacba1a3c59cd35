package servicealloc

import (
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/protowalk"
)

// ReadsAsStored reports whether a stored v1 Service, raw (its protobuf
// message, out of the storage envelope), is read back unchanged: neither
// the decode's defaults (DefaultService) nor the read defaulting of
// Allocator.DefaultOnRead would set, clear or add a field of it. A Service
// this server or any recent kube-apiserver wrote holds every default
// already; one written before a default existed (internalTrafficPolicy,
// ipFamilies) does not. False also for bytes the walk does not judge: a
// field with an unexpected wire type, bytes that are not well formed, or a
// message field given twice (which protobuf merges). It does not check the
// fields it does not read: bytes that do not decode may read as stored,
// and whoever decodes them fails as a decode here would.
//
// It reads the fields those two functions read, with protobuf's rules (the
// last value of a scalar given twice wins; a pointer field is set when
// present, even empty), and must change with them:
// FuzzReadsAsStored holds it equal to running them.
func ReadsAsStored(raw []byte) bool {
	var spec, status []byte
	var specs, statuses int
	ok := walk(raw, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 2:
			spec, specs = v, specs+1
		case 3:
			status, statuses = v, statuses+1
		default:
			return true
		}
		return typ == protowire.BytesType
	})
	if !ok || specs > 1 || statuses > 1 {
		return false
	}
	var s storedSpec
	if !s.read(spec) {
		return false
	}
	ingress, ok := readIngress(status)
	return ok && s.decodeDefaulted(ingress) && s.readDefaulted()
}

// storedSpec is what the defaults read of a stored ServiceSpec.
type storedSpec struct {
	typ, affinity, clusterIP, externalPolicy []byte // views of the message
	clusterIPs, externalIPs, families        int
	affinityConfig, clientIP, timeout        int // occurrences of the nested messages and the timeout
	internalPolicy, allocateNodePorts        bool
	portsDefaulted                           bool
}

func (s *storedSpec) read(b []byte) bool {
	s.portsDefaulted = true
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 1: // ports
			s.portsDefaulted = s.portsDefaulted && portDefaulted(v)
		case 3:
			s.clusterIP = v
		case 4:
			s.typ = v
		case 5:
			s.externalIPs++
		case 7:
			s.affinity = v
		case 11:
			s.externalPolicy = v
		case 14:
			s.affinityConfig++
			if !s.readAffinityConfig(v) {
				return false
			}
		case 18:
			s.clusterIPs++
		case 19:
			s.families++
		case 20:
			s.allocateNodePorts = true
			return typ == protowire.VarintType
		case 22:
			s.internalPolicy = true
		default:
			return true
		}
		return typ == protowire.BytesType
	})
}

// readAffinityConfig reads a SessionAffinityConfig: its clientIP, and that
// one's timeoutSeconds.
func (s *storedSpec) readAffinityConfig(b []byte) bool {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num != 1 {
			return true
		}
		s.clientIP++
		return typ == protowire.BytesType && walk(v, func(num protowire.Number, typ protowire.Type, _ []byte) bool {
			if num != 1 {
				return true
			}
			s.timeout++
			return typ == protowire.VarintType
		})
	})
}

// portDefaulted reports whether a ServicePort has the protocol and target
// port DefaultService would otherwise set.
func portDefaulted(b []byte) bool {
	var protocol []byte
	var targets int
	var target struct {
		typ, intVal uint64
		strVal      []byte
	}
	ok := walk(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 2:
			protocol = v
			return typ == protowire.BytesType
		case 4:
			targets++
			return typ == protowire.BytesType && walk(v, func(num protowire.Number, typ protowire.Type, v []byte) bool {
				switch num {
				case 1:
					target.typ = protowalk.Varint(v)
				case 2:
					target.intVal = protowalk.Varint(v)
				case 3:
					target.strVal = v
					return typ == protowire.BytesType
				default:
					return true
				}
				return typ == protowire.VarintType
			})
		}
		return true
	})
	// The target port is defaulted when it is the int 0 or the string "",
	// as a struct: its three fields compared (int32 and int64 as decoded).
	unset := (int64(target.typ) == 0 || int64(target.typ) == 1) && int32(target.intVal) == 0 && len(target.strVal) == 0
	return ok && targets <= 1 && len(protocol) != 0 && !unset
}

// readIngress reads a ServiceStatus's load-balancer ingresses: whether
// each with an ip has its ipMode.
func readIngress(status []byte) (defaulted, ok bool) {
	defaulted = true
	var balancers int
	ok = walk(status, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num != 1 {
			return true
		}
		balancers++
		return typ == protowire.BytesType && walk(v, func(num protowire.Number, typ protowire.Type, v []byte) bool {
			if num != 1 {
				return true
			}
			ip, mode, ok := readOneIngress(typ, v)
			defaulted = defaulted && (len(ip) == 0 || mode)
			return ok
		})
	})
	return defaulted, ok && balancers <= 1
}

// readOneIngress reads a LoadBalancerIngress: its ip, and whether it has an
// ipMode.
func readOneIngress(typ protowire.Type, b []byte) (ip []byte, mode, ok bool) {
	if typ != protowire.BytesType {
		return nil, false, false
	}
	ok = walk(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch num {
		case 1:
			ip = v
		case 3:
			mode = true
		default:
			return true
		}
		return typ == protowire.BytesType
	})
	return ip, mode, ok
}

// decodeDefaulted reports whether DefaultService leaves the spec as it is
// (ingressDefaulted: every load-balancer ingress with an ip has its ipMode).
func (s *storedSpec) decodeDefaulted(ingressDefaulted bool) bool {
	switch {
	case len(s.affinity) == 0, len(s.typ) == 0, !s.portsDefaulted:
		return false
	case s.affinityConfig > 1 || s.clientIP > 1:
		return false // merged by protobuf: not judged here
	case string(s.affinity) == string(corev1.ServiceAffinityNone) && s.affinityConfig > 0:
		return false
	case string(s.affinity) == string(corev1.ServiceAffinityClientIP) && s.timeout == 0:
		return false
	}
	t := corev1.ServiceType(s.typ)
	external := t == corev1.ServiceTypeNodePort || t == corev1.ServiceTypeLoadBalancer ||
		t == corev1.ServiceTypeClusterIP && s.externalIPs > 0
	if external && len(s.externalPolicy) == 0 {
		return false
	}
	if !s.internalPolicy && (t == corev1.ServiceTypeClusterIP || t == corev1.ServiceTypeNodePort || t == corev1.ServiceTypeLoadBalancer) {
		return false
	}
	return t != corev1.ServiceTypeLoadBalancer || s.allocateNodePorts && ingressDefaulted
}

// readDefaulted reports whether Allocator.DefaultOnRead leaves the spec as
// it is: clusterIPs follow clusterIP, an ExternalName Service has no
// internal traffic policy, and every other one its families, or nothing
// to take them from.
func (s *storedSpec) readDefaulted() bool {
	if len(s.clusterIP) != 0 && s.clusterIPs == 0 {
		return false
	}
	if corev1.ServiceType(s.typ) == corev1.ServiceTypeExternalName {
		return !s.internalPolicy
	}
	return s.families > 0 || string(s.clusterIP) != corev1.ClusterIPNone && s.clusterIPs == 0
}

// walk calls field with each field of b, in order, until it returns false;
// false when b is not well formed or field returned false.
func walk(b []byte, field func(num protowire.Number, typ protowire.Type, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, v, rest, err := protowalk.Field(b)
		if err != nil || !field(num, typ, v) {
			return false
		}
		b = rest
	}
	return true
}
