// Package services tests the Service registry (internal/registry/services)
// through the real API server in-process (internal/testserver): a client
// that gives up while its address is reserved, and racing finalizer
// removals that must release an address exactly once.
package services
