// Package servicecidr tests the ServiceCIDR controller (pkg/servicecidr)
// against the real API server in-process (internal/testserver): the
// finalizer and its deletion grace, a deletion blocked by an IPAddress and
// released by its delete, and the periodic re-check with no event.
package servicecidr
