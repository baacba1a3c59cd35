// Package invariants reads the Service-allocation state straight from etcd and
// reports where it breaks the allocator's promises. Check takes one
// consistent snapshot (every read at one etcd revision) of the stored
// Services and of one model's reservations, and returns a Report; tests and
// harnesses assert on it and log its String.
//
// What a stored Service holds is internal/holding's answer, the one the allocator
// releases and the repairs rebuild from: a decision with its own table of
// cases and tests, not allocator logic under check. Everything else here (the
// reads, the reservations, the comparison) is written again rather than
// taken from the allocator, so that a checker does not inherit the bugs of
// what it checks.
//
// What reserves an address (design.md §1, §5):
//
//	model      a ClusterIP ip of Service ns/name is reserved when            a reservation leaks when
//	ipaddress  the IPAddress named ip has parentRef {"", services, ns, name}  its parent Service is absent or does not hold ip
//	bitmap     its bit is set in the stored map whose range contains ip       its bit is set and no Service holds the address
//	           (serviceips for the first family, secondaryserviceips
//	           for the second)
//	both       a node port's bit is set in servicenodeports                   its bit is set and no Service holds the port
//
// The invariants, and why each matters:
//   - No ClusterIP and no node port is held by two stored Services
//     (DuplicateIPs, DuplicateNodePorts). A duplicate sends one Service's
//     traffic to another's endpoints, and no repair undoes it.
//   - Everything a stored Service holds is reserved for it (Unreserved).
//     An unreserved address is free to the allocator: the next create takes
//     it and the two Services become a duplicate.
//   - Leaked reservations (Leaked) waste the range but harm nothing; the
//     repair frees them after its grace period, so they are reported, and a
//     caller that has run no repair may expect some after failed writes.
//
// Only the chosen model's records are read: the bitmap model's server keeps
// no IPAddresses and the IPAddress model's no ClusterIP maps (node ports are
// a map in both). IPAddresses whose parentRef is not a Service are no
// Service's reservation and are neither checked nor reported. The default
// `kubernetes` Service is a stored Service like any other, so its address is
// held by default/kubernetes and neither leaked nor a duplicate.
package invariants
