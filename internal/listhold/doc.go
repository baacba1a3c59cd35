// Package listhold keeps the revision of a paged list readable in etcd while
// its client is still reading the pages.
//
// Every page after a list's first is read at the first page's revision (the
// continue token carries it), and etcd answers such a read only while that
// revision is at or after its compacted revision. The server compacts etcd
// every interval to the revision of the interval before (k8s.io/apiserver's
// compactor, as kube-apiserver does), so a list whose pages take longer than
// one to two intervals ends in 410 Expired halfway: at a million Services,
// kubectl pages 500 at a time at client-go's default five requests a second,
// about seven minutes for the whole list.
//
// The invariants:
//   - A server holds the revision of every list it serves a page of whose
//     answer continues (a continue token): from that page until Limits.Idle
//     passes without another page of it, and never longer than
//     Limits.MaxAge after the first (a client that stops reading, or reads
//     forever, holds history for no more than that).
//   - A server publishes its oldest hold under a key of its own in etcd
//     (etcdlayout.Layout.ListHold), on a lease: a server that dies takes its
//     holds with it within the lease's TTL.
//   - A compaction made through Shared.Guard goes no further than the oldest
//     hold any server published, nor this server's own: whichever server's
//     compactor wins the interval (they take turns through a compare-and-swap
//     on etcd's compact_rev_key), a list in progress on any of them stays
//     readable.
//
// A hold is published when a list's first page is served; a compaction can
// reach a revision only an interval after it was current (the compactor
// compacts to the revision it read the interval before), so the hold is in
// etcd long before that. What the holds do not cover: compactions by anyone
// else on the same etcd (a kube-apiserver's compactor, etcd's own
// auto-compaction), and a list's first page served from a watch cache, whose
// hold starts at its second page.
package listhold
