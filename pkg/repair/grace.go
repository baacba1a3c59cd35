package repair

import "time"

// RequestTimeout is kube-apiserver's default --request-timeout: the longest
// a Service create can take between reserving its ClusterIP and storing the
// Service. On a real kube-apiserver the address is reserved before the
// validating admission webhooks run, so a create with slow webhooks holds a
// reserved-but-not-stored address for up to this long.
const RequestTimeout = 60 * time.Second

// leakGraceMargin is added to RequestTimeout for the clock skew between the
// replica that reserved and the repair, and for the time between a pass's map
// read and its Service list.
const leakGraceMargin = 30 * time.Second

// DefaultLeakGrace is the default leak grace of the ClusterIP-bitmap and node-port repairs, in the server and
// in the one-shot `allocator repair` job alike: longer than any
// reserved-but-not-yet-stored allocation can exist (RequestTimeout plus a
// margin). A shorter grace frees the address of a create that is merely slow
// and hands it out again: two Services with one ClusterIP.
const DefaultLeakGrace = RequestTimeout + leakGraceMargin
