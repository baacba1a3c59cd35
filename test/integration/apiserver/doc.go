// Package apiserver tests the API server (internal/apiserver) as a whole, started
// in-process by internal/testserver: the scope warning and the kubernetes
// Service's disregard of scopes, and a fresh server's /metrics (no
// allocation error, no empty cidr label) in both models.
package apiserver
