// Package repair tests pkg/repair against the real API server in-process
// (internal/testserver): the RangeAllocation repair core on a node-port map
// of its own, with the Services it reads again served by the server, and the
// node-port repair with faults planted straight into etcd, a Service deleted
// during a pass, and, with NODEPORT_SCALE set, its timing.
package repair
