// Package fault is the fault-injection harness of the highly available set-up
// a real 3-member etcd, several replicas of our server in this
// process, each given all three members (--etcd-servers), member 0 reached
// through a fault proxy (internal/faultproxy) that makes it slow, stalls it
// or cuts it off, and clients that give up after one second, as kubectl
// --request-timeout=1s does (client-go sends ?timeout=1s, so the server's
// request ends then too). A write whose answer the server never got may then
// still land a second later at the slow member; a server that treats it as
// failed and releases its addresses hands them to the next Service.
//
// Each configuration runs:
//
//	phase       what happens
//	1 faults    the proxy cycles through its faults (delay 2 s, delay only
//	            the Service keys, hold then release, drop then cut) while
//	            workers create, update (ClusterIP→NodePort,
//	            SingleStack→PreferDualStack) and delete Services; a ledger
//	            keeps what was acknowledged and what failed
//	settle      the proxy passes everything; wait until etcd's Service and
//	            allocation keys have been quiet for a few seconds
//	2 fill      create Services until "range is full" (the ClusterIP range
//	            of each family, or the node-port range): a released address
//	            still held by a stored Service is handed out again and
//	            becomes a visible duplicate
//	check       read etcd through members 1 and 2 (not the proxy) with
//	            internal/invariants, before any repair when the
//	            configuration has none
//
// and asserts: no ClusterIP or node port held by two stored Services; every
// stored Service's addresses and ports reserved for it; no acknowledged
// write lost (an acknowledged create stored with its addresses and ports
// unless deleted since by an acknowledged delete, an acknowledged delete
// absent, a Service whose later update failed still holding its primary
// address). Leaked reservations are reported, not asserted. Each
// configuration logs one line of figures and TestFault a table of them.
//
// The matrix is the models {bitmap, ipaddress} × workloads {ClusterIP,
// NodePort} × {IPv4, dual-stack} × {3 endpoints with the proxy, 3 endpoints
// with the proxy and the repair every 3 s, 1 endpoint (the control: no slow
// member)}. FAULT_FULL=1 runs all of it with three replicas, twelve workers
// and three fault cycles (hack/fault.sh, about twenty minutes on two cores).
// The default is a bounded subset for CI's `go test -race ./...`, about 75 s
// on two cores: ipaddress/NodePort/IPv4 and bitmap/ClusterIP/dual-stack with
// 3 endpoints, and the first again with 1 endpoint; -short skips it.
//
// Beside the matrix, TestLostDeleteReleases and TestLostClaimLeavesNothing
// lose one write's answer on purpose, and TestLateWriteAfterRepairGrace
// delays one replica's Service writes (10 s, on its only endpoint, so its
// fences cannot be closed either) past another replica's repair grace
// (2 s), fills both ranges from that replica, and checks that no late write
// lands on an address the repair freed: the repair waits for the writer's
// write lease.
//
// Only loopback addresses are used, every loop is bounded in count and time,
// and everything started is stopped by t.Cleanup.
package fault
