package repair

import "github.com/allocator/allocator/pkg/allocation"

// RequestTimeout is the longest a request of the API server runs
// (allocation.RequestTimeout): a Service create reserves its ClusterIP and
// sends its write within it. On a real kube-apiserver the address is
// reserved before the validating admission webhooks run, so a create with
// slow webhooks holds a reserved-but-not-stored address for up to this long.
const RequestTimeout = allocation.RequestTimeout

// DefaultLeakGrace is the default leak grace of the ClusterIP-bitmap and
// node-port repairs, in the server and in the one-shot `allocator repair`
// job alike (allocation.LeakGrace: RequestTimeout plus a margin): a
// reservation seen for that long with no Service was made by a request that
// has ended. A shorter grace frees the address of a create that is merely
// slow and hands it out again: two Services with one ClusterIP. What that
// request sent may still be in flight then; Options.Writes tells when it can
// no longer land.
const DefaultLeakGrace = allocation.LeakGrace

// DefaultOrphanGrace is the default Options.OrphanGrace, the same bound:
// an IPAddress is created in its Service's request, before the Service.
const DefaultOrphanGrace = allocation.LeakGrace
