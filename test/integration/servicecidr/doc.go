// Package servicecidr tests the ServiceCIDR controller (pkg/ipaddress/servicecidr)
// against the real API server in-process (internal/testserver): the
// finalizer and its deletion grace, a deletion blocked by an IPAddress and
// released by its delete, and the periodic re-check with no event. It also
// tests the ServiceCIDR lifecycle (pkg/ipaddress/lifecycle: draining under concurrent
// creates on several replicas, manual-only ranges) and the guardrails and
// overlap warnings of internal/registry/servicecidrs through the server.
package servicecidr
