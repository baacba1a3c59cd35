// Package ipaddress tests the IPAddress-model allocator
// (pkg/ipaddress) against the real API server in-process
// (internal/testserver): draining IPv4 and IPv6 ranges, a /64, ServiceCIDRs
// added, shrunk and removed, races between allocators, API faults, a release
// from a stale cache, and scoped ServiceCIDRs.
package ipaddress
