// Package iprepair tests the ClusterIP repairs and migrations
// (pkg/repair/iprepair) against the real API server in-process
// (internal/testserver) with faults planted straight into etcd: the bitmap
// repair, the IPAddress repair (one-shot passes and Run), the migration
// between the models both ways, races with creates, kube-apiserver's own
// data (internal/fixtures), and, with ALLOCATOR_SCALE set, their timings.
package iprepair
