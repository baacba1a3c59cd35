// Package parity checks that our Service and ServiceCIDR API answers as
// kube-apiserver answers.
//
// A corpus of cases (corpus_*.go), each a short sequence of requests, is sent
// to a server; every answer is reduced to what a client can rely on (status
// code, reason, message, field causes, warnings, and the object's metadata
// names, spec and status) and kept as a Record. hack/capture-parity.sh sends
// the corpus to a real kube-apiserver and writes testdata/parity/<family>.json;
// the integration test TestParity sends it to ours, in both allocator models,
// and fails on any difference.
//
// Invariants:
//   - Allocated values are compared by shape, not value. An address or node
//     port the corpus did not write (a dynamic pick) becomes a symbol ("<ip1>",
//     "<port2>") numbered by first appearance in its case, in the objects and
//     in every message; the same value is the same symbol throughout the case.
//     A value the corpus wrote is kept as is, so a requested address or port
//     that is not honoured is a difference.
//   - Cases are independent: each starts from a server holding only what the
//     server creates for itself (the "kubernetes" Service and ServiceCIDR),
//     because the runner deletes what a case created before the next begins.
//   - The record names each request; replaying a corpus that no longer
//     matches its record fails as stale rather than comparing unlike things.
package parity
