// Package holding decides what a stored Service holds: the cluster IPs and the
// node ports no other Service may be given while it exists. The allocator
// releases exactly this when a Service is deleted, the repairs rebuild their
// maps from it, and the invariant checks compare it with etcd, so one answer
// serves them all; an answer that differed would free in one place what
// another still counts as held.
//
// A Service holds what the allocator reserves for it, read from its stored
// fields. kube-apiserver's repairs read the same fields; where its release
// and its repair disagree, this package follows what was reserved:
//
//	case                                          cluster IPs          node ports
//	nil Service                                   none                 none
//	ExternalName                                  none                 none, even with nodePort values
//	headless (spec.clusterIP "None")              none                 (by type)
//	spec.clusterIPs empty, spec.clusterIP set     spec.clusterIP       -
//	"" or "None" inside spec.clusterIPs           skipped, not invalid -
//	text that is no address (ParseClusterIP)      returned as invalid  -
//	IPv4-mapped IPv6 ("::ffff:10.0.0.1")          the IPv4 address     -
//	dual-stack                                    both, primary first  -
//	ClusterIP type with nodePort values           (addresses)          none
//	NodePort, LoadBalancer                        (addresses)          every non-zero nodePort
//	same port for TCP and UDP, or listed twice    -                    once
//	healthCheckNodePort                           -                    only for LoadBalancer with externalTrafficPolicy Local
//	one address or port named twice               once                 once
//
// Nothing is reserved for a nodePort value on a Service of another type, or
// for a healthCheckNodePort the Service does not need, so none of them is
// held: counting them would let a delete free a port another Service holds.
// A port outside the node-port range, or an address outside every range, is
// still held; the repairs report it.
package holding
