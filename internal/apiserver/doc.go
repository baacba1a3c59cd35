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
//     <data-dir>/admin.kubeconfig (mode 0600, reused across restarts), the
//     server's own loopback token, and what the options of
//     options_security.go add. Anonymous requests get 401, except reads
//     of /healthz, /livez, /readyz (and their checks) and /version, which
//     kubelet probes and load balancers make without credentials
//     (anonymous.go; clean paths only, and the authorizer checks again).
//     This holds with delegated authentication too: k8s.io/apiserver's
//     delegated authenticator always ends in an anonymous one, which made
//     an unknown token a 403 for system:anonymous instead of a 401, so its
//     anonymous answers are dropped (withoutAnonymous).
//
// Running beside a control plane (options_security.go) uses
// k8s.io/apiserver's options as they are: DelegatingAuthenticationOptions
// (--client-ca-file, --authentication-kubeconfig for TokenReview,
// --requestheader-*), DelegatingAuthorizationOptions
// (--authorization-kubeconfig for SubjectAccessReview; system:masters and
// the probe paths need no review), AuditOptions (--audit-*) and
// FeatureOptions (--profiling; priority and fairness off, the flowcontrol
// API is not served). What is ours, and why:
//   - --tls-cert-file/--tls-private-key-file are our flags on the
//     library's SecureServingOptions.ServerCert: its AddFlags would register
//     --bind-address, --secure-port and --cert-dir a second time.
//   - --token-auth-file: the library has the authenticator (tokenfile) but
//     no option for it (kube-apiserver's BuiltInAuthenticationOptions live
//     in k8s.io/kubernetes).
//   - etcd: the library's storagebackend transport (--etcd-cafile,
//     --etcd-certfile, --etcd-keyfile) but not EtcdOptions, whose storage
//     factory writes JSON under <group>/<resource> keys; kube-apiserver's
//     layout and protobuf encoding are the contract (storage.go). One read
//     bounded by 10 s at start (probeEtcd) turns an unreachable etcd, or one
//     refusing our certificate, into one line instead of a late timeout.
//   - Every file an option names is read and checked in Validate (a
//     certificate must match its key, a CA file must hold a certificate, a
//     token file must parse, a kubeconfig must load, an audit policy must
//     decode), so a wrong file is one line at start, before anything
//     listens; library errors spanning several lines are folded into one.
//   - Without --authorization-kubeconfig every authenticated user may do
//     everything, as before these options existed; with it, the cluster's
//     RBAC decides for everyone but system:masters (the admin token).
//   - Shutdown ends open watches (shutdown.go): net/http's graceful
//     shutdown otherwise waits its whole 60 s timeout for them.
//   - New objects in a namespace that does not exist are refused (404) before
//     anything is reserved.
package apiserver
