package slim

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Service is the copy of svc that the server's Service informer keeps:
// the fields its readers read. The decoded Services are the largest part
// of the server's live heap; the slim copy keeps the struct itself, which
// the readers' typed informer needs, and drops what hangs from it
// (internal/apiserver's BenchmarkSlimServiceBytes measures both).
//
// The readers, and what each reads of a cached Service:
//
//	field                                   reader
//	name, namespace                         the informer's keys, the listers (a namespace's by a scan),
//	                                        report.ServiceKey and OldestFirst, the repairs' fresh reads
//	                                        of a Service, the IPAddress repair's parentRef lookups
//	uid                                     the repairs' fresh reads (still the same Service?), the owner
//	                                        of an IPAddress the repair or the carry-over creates
//	resourceVersion                         the informer itself: its store's LastStoreSyncResourceVersion
//	                                        (repair.InformerServices) and update-or-resync; events
//	creationTimestamp                       report.OldestFirst: the older of two holders keeps the key
//	labels                                  the IPAddress repair's scope check (scope.Scope.Matches)
//	typeMeta, name, namespace, uid, rv      an event on the Service (reference.GetReference; the
//	                                        scheme answers for an unset typeMeta)
//	spec.type, clusterIP, clusterIPs        holding.ClusterIPs: the IPAddress repair's indexes and
//	                                        passes (the IPAddress model's carry-over), the bitmap repair
//	spec.type, ports[].nodePort,            holding.NodePorts: the node-port repair
//	healthCheckNodePort,
//	externalTrafficPolicy
//
// Everything else goes: annotations, owner references, finalizers,
// deletionTimestamp (a terminating Service holds its addresses and ports
// until it is gone, so no reader tells it apart), managedFields, the
// selector, ipFamilies and ipFamilyPolicy (the family is the address's
// own), externalName, session affinity, load-balancer settings, the status,
// and the ports without a nodePort. A port with one keeps only it and its
// protocol, which no reader reads but which says what the port is at no
// cost (a constant). Nobody writes a cached Service back: the repairs write
// IPAddresses, events and maps, and read a Service again before a write
// depends on it. A reader that needs a field dropped here must add it
// here, and to the readers of internal/apiserver's
// TestSlimServiceKeepsWhatReadersRead.
//
// The slim copy shares no slice with svc, only the label map and strings,
// allocations of their own: svc, the decoded object, is garbage once the
// informer stores the copy. It does not change svc. A Service that is slim
// already (isSlim) is returned as it is: a transform must be idempotent,
// and an informer's watch list transforms each object twice (the
// reflector's temporary store, then its queue's Replace), so a second
// copy of each Service would be garbage made for nothing.
func Service(svc *corev1.Service) *corev1.Service {
	if isSlim(svc) {
		return svc
	}
	return copyService(svc)
}

// copyService is Service's copy of svc, made whether svc is slim or not.
func copyService(svc *corev1.Service) *corev1.Service {
	spec := &svc.Spec
	slim := &corev1.Service{
		TypeMeta: svc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			CreationTimestamp: svc.CreationTimestamp,
			Labels:            svc.Labels,
		},
		Spec: corev1.ServiceSpec{
			Type: known(spec.Type, corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
				corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName),
			ClusterIP:           known(spec.ClusterIP, corev1.ClusterIPNone),
			HealthCheckNodePort: spec.HealthCheckNodePort,
			ExternalTrafficPolicy: known(spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster,
				corev1.ServiceExternalTrafficPolicyLocal),
		},
	}
	if len(spec.ClusterIPs) > 0 {
		slim.Spec.ClusterIPs = make([]string, len(spec.ClusterIPs))
		for i, ip := range spec.ClusterIPs {
			if ip == spec.ClusterIP {
				ip = slim.Spec.ClusterIP // one string for the primary address
			}
			slim.Spec.ClusterIPs[i] = ip
		}
	}
	slim.Spec.Ports = slimPorts(spec.Ports)
	return slim
}

// isSlim reports whether svc holds nothing that Service drops, so that
// its slim copy would equal it: each field Service drops is zero, as
// reflect.Value.IsZero tells zero (a slice or map empty but not nil is
// not). The fields are named one by one: the informers ask it of every
// Service they store, twice, and comparing copies of the structs by
// reflection takes about a microsecond each, seconds of a start at a
// million Services. TestIsSlim sets each field of a Service in turn, so that a
// field the API adds later, which this does not name, fails it.
func isSlim(svc *corev1.Service) bool {
	m := &svc.ObjectMeta
	//lint:ignore SA1019 a value stored long ago is dropped, so it must be zero here
	if m.GenerateName != "" || m.SelfLink != "" || m.Generation != 0 || m.DeletionTimestamp != nil ||
		m.DeletionGracePeriodSeconds != nil || m.Annotations != nil || m.OwnerReferences != nil ||
		m.Finalizers != nil || m.ManagedFields != nil {
		return false
	}
	spec := &svc.Spec
	if spec.ClusterIPs != nil && len(spec.ClusterIPs) == 0 || spec.Ports != nil && len(spec.Ports) == 0 {
		return false // a slim copy holds no empty slice
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.NodePort == 0 || p.Name != "" || p.AppProtocol != nil || p.Port != 0 || p.TargetPort != (intstr.IntOrString{}) {
			return false
		}
	}
	if spec.Selector != nil || spec.ExternalIPs != nil || spec.SessionAffinity != "" || spec.LoadBalancerIP != "" ||
		spec.LoadBalancerSourceRanges != nil || spec.ExternalName != "" || spec.PublishNotReadyAddresses ||
		spec.SessionAffinityConfig != nil || spec.IPFamilies != nil || spec.IPFamilyPolicy != nil ||
		spec.AllocateLoadBalancerNodePorts != nil || spec.LoadBalancerClass != nil ||
		spec.InternalTrafficPolicy != nil || spec.TrafficDistribution != nil {
		return false
	}
	return svc.Status.LoadBalancer.Ingress == nil && svc.Status.Conditions == nil
}

// slimPorts returns the ports that have a nodePort, each with its nodePort
// and protocol only; nil when none has one.
func slimPorts(ports []corev1.ServicePort) []corev1.ServicePort {
	n := 0
	for _, p := range ports {
		if p.NodePort != 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]corev1.ServicePort, 0, n)
	for _, p := range ports {
		if p.NodePort != 0 {
			protocol := known(p.Protocol, corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
			out = append(out, corev1.ServicePort{Protocol: protocol, NodePort: p.NodePort})
		}
	}
	return out
}

// known returns the constant among values that s equals, else s: each
// string decoded from protobuf is an allocation of its own, a constant none.
func known[T ~string](s T, values ...T) T {
	for _, v := range values {
		if s == v {
			return v
		}
	}
	return s
}
