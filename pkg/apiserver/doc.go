// Package apiserver is the allocator's Kubernetes-compatible API server, built
// on k8s.io/apiserver without k8s.io/kubernetes. It serves /api/v1 services
// (+status), namespaces and events, and /apis/networking.k8s.io/v1
// ipaddresses and servicecidrs (+status), with discovery, watch, field
// selectors, server-side apply, OpenAPI v2 and v3, and kubectl tables.
//
// Shape (as kubernetes/sample-apiserver): Options → Config (Options.Config) →
// CompletedConfig (Config.Complete) → Server (CompletedConfig.New) →
// Server.Run(ctx). The allocators come from Config.NewAllocator, one per
// family of --service-cluster-ip-range; the Service registry reaches them only
// through pkg/servicealloc's public API.
//
// Invariants:
//   - Stored data is kube-apiserver's: keys <etcd-prefix>/services/specs/<ns>/<name>,
//     /namespaces/<name>, /events/<ns>/<name>, /ipaddresses/<ip>,
//     /servicecidrs/<name>; values are protobuf in the "k8s\x00" envelope at
//     version v1. A kube-apiserver can read what we write and we read what
//     it wrote.
//   - The k8s.io/api types are registered as both v1 and the internal
//     version, so conversion is the identity; OpenAPI names come from a
//     second, versioned-only scheme so no "__internal" kind is published.
//   - No allocation happens before bootstrap opened the allocators (503 with
//     Retry-After until then), and /readyz fails until bootstrap is done
//     (namespaces default and kube-system, the default ServiceCIDR, the
//     kubernetes Service on network+1) and the allocators' caches are synced.
//   - Only authenticated requests are served: the generated admin token in
//     <data-dir>/admin.kubeconfig (mode 0600, reused across restarts) and the
//     server's own loopback token. Anonymous requests get 401, except reads
//     of /healthz, /livez, /readyz (and their checks) and /version, which
//     kubelet probes and load balancers make without credentials
//     (anonymous.go; clean paths only, and the authorizer checks again).
//   - Shutdown ends open watches (shutdown.go): net/http's graceful
//     shutdown otherwise waits its whole 60 s timeout for them.
//   - New objects in a namespace that does not exist are refused (404) before
//     anything is reserved.
package apiserver
