// Package servicealloc gives a Kubernetes API server built on k8s.io/apiserver
// the ClusterIP part of a Service registry: upstream's defaulting and
// validation of the IP fields (type, clusterIP/clusterIPs, ipFamilies,
// ipFamilyPolicy, headless "None", ExternalName) and of ports, and the
// reserve → store → release protocol around the store's writes. It allocates
// through allocation.Interface, one allocator per IP family, so the bitmap
// and the IPAddress model plug in alike; with Config.NodePorts (a
// nodeport.Interface) it also allocates the node ports of NodePort and
// LoadBalancer Services under the same protocol (nodeports.go), and without
// it refuses those types.
//
// Wiring it into a generic registry store of *corev1.Service takes four
// calls; the package's Example runs the steps the store's hooks then take,
// and examples/embed is a whole server built this way:
//
//	alloc, err := servicealloc.New(servicealloc.Config{Allocators: []allocation.Interface{v4, v6}})
//	...
//	strategy, status := servicealloc.NewStrategies(scheme) // the store's strategies; status for a status store
//	...
//	err = store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: servicealloc.TrackDeletes(optsGetter)})
//	...
//	storage, err := servicealloc.NewREST(store, alloc, nil) // serve storage as "services"
//
// The third argument of NewREST is an optional Fencer (this module's server
// passes internal/fence's, on etcd); with nil, what a write whose outcome is
// unknown may have stored is left to the repair.
//
// Invariants, each with the failure it prevents:
//   - Validation (including the cluster-dependent family checks) and, for a
//     create, the already-exists check run before anything is reserved: a
//     request that cannot succeed must not touch the allocators (upstream
//     reserved first and released on failure, which churned the bitmap and
//     briefly hid free addresses from other creates).
//   - A reserved address is released whenever the Service is not stored
//     (validation after the hook, a failed write, a lost compare-and-swap
//     attempt inside an update): a failed create leaks nothing.
//   - Addresses an update drops (type to ExternalName, dual- to
//     single-stack) are released only after the update is stored: releasing
//     first could hand an address that is still published to a new Service.
//   - A delete releases the Service's addresses after the Service is gone
//     from storage, for the same reason, and exactly once: only the request
//     whose storage delete removed the object releases. k8s.io/apiserver
//     runs AfterDelete also for the losers of concurrent updates that each
//     remove a deleting Service's last finalizer (their deletes find
//     NotFound); releasing there freed the address again after another
//     Service had taken it: a duplicate ClusterIP.
//   - Every release (rollback, settlement of an update, delete) runs on a
//     context detached from the request, with its own timeout: a cancelled
//     or timed-out request still releases what it reserved instead of
//     leaking it until repair.
//   - Ownership is checked by namespace/name, not UID: neither record
//     carries a UID (the bitmap records no owner; an IPAddress's
//     spec.parentRef has group, resource, namespace and name only, and a
//     Service's UID does not exist yet when its address is claimed, since
//     the store sets it after BeginCreate). A Service re-created under the
//     same name is indistinguishable from the old one in the record, which
//     is why the exactly-once release above is what keeps it safe.
//   - Dry-run asks the allocators' DryRun views: conflicts are reported,
//     nothing changes.
//
// Error texts and codes follow design.md §4: a full range is a 500 "failed to
// allocate a serviceIP: range is full"; a taken or out-of-range static
// address is a 422 on spec.clusterIPs "failed to allocate IP <ip>: <err>"; an
// allocator that is not ready is a 503 with Retry-After.
package servicealloc
