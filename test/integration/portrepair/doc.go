// Package portrepair tests the node-port repair
// (pkg/portallocator/portrepair) against the real API server in-process
// (internal/testserver): faults planted straight into etcd, a Service
// deleted during a pass, and, with NODEPORT_SCALE set, its timing.
package portrepair
