// Package integration runs the allocator API server in-process on a real
// embedded etcd and drives it with client-go over HTTPS, authenticated with
// the generated admin kubeconfig.
package integration
