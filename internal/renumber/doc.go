// Package renumber moves the Services that hold ClusterIPs inside a draining
// ServiceCIDR to addresses outside it, through the Kubernetes API (design.md
// §11). The API never changes a Service's primary ClusterIP in place, so each
// Service is re-created: deleted (preconditioned on the UID and
// resourceVersion that were read) and created again with its name, labels,
// annotations, finalizers, owner references and spec, the moved families'
// addresses cleared or replaced.
//
// What a Service's re-create asks for, per IP family:
//
//	family's address          --to given                    no --to
//	inside --from's static    the address at the same       the address at the same offset of the
//	band (moved, offset       offset of --to (static)       narrowest open CIDR holding a dry run's
//	kept)                                                   pick (static)
//	inside --from (moved)     a free address of --to        the server's pick: left empty, or, when a
//	                          (a static request)            later family is pinned, a static request
//	                                                        for what a dry run picked
//	outside --from (kept)     the same address (static)     the same address (static)
//
// The API refuses an empty entry before a given one in spec.clusterIPs, so a
// dual-stack Service that keeps its secondary address needs a concrete
// primary one: a server-side dry run of a probe Service (same namespace and
// labels, so scopes and lifecycles choose as for the real create) names it.
// kube-apiserver's dry run picks no real address (it answers the first
// address of one of its ranges) and checks a requested address against one
// of its ServiceCIDRs only: in front of it, the allocator webhook names its
// pick in a warning that renumber reads (dryrun.go, CaptureWarnings); a
// pick no open ServiceCIDR hands out leaves the Service untouched, and a
// pin refused as "not in the valid range" while it lies in an open
// ServiceCIDR is checked free through its IPAddress instead.
//
// Invariants, and why:
//   - No Service is lost, and none is brought back that someone else
//     deleted. Right before its delete, a Service's re-create object and
//     the resourceVersion its delete is conditional on are written to the
//     Journal and synced (OpDeleting); as soon as the delete is answered,
//     that is confirmed (OpDeleted). A run killed between a delete and its
//     create leaves the entry pending; the next run re-creates a pending
//     Service that no longer exists only when renumber's delete is why
//     (Judge): the journal confirms the delete, and the Service's history
//     since that resourceVersion (a watch from it) shows nothing created in
//     its place. A Service changed after the read (the conditional delete
//     cannot have deleted it) or created again and deleted since was deleted
//     by someone else: it is reported and left deleted. A delete in flight
//     at the kill, with the Service deleted straight after the read, is
//     renumber's or another client's, which look the same: it is reported
//     in doubt (exit 2) and kept in the journal until a run with
//     RecreateInDoubt re-creates it. Only the deletes in flight (Workers at
//     most) can be in doubt: a Service is journalled when its own delete is
//     about to be sent, not with its batch. A create that fails on an
//     address or port taken meanwhile is retried with fresh addresses
//     (bounded) rather than given up.
//   - A static-band address keeps its offset (KeepOffset: 10.96.0.10 of
//     10.96.0.0/16 becomes 10.100.0.10 of 10.100.0.0/16), because users
//     choose those addresses and name them elsewhere (a kubelet's
//     clusterDNS names kube-dns's). When the offset lies beyond the target
//     range, inside --from, or at an address held, the Service is left
//     where it is and reported (Config.IgnoreStaticBand moves it to any
//     free address instead): an address that moves silently breaks what
//     names it, while the old one keeps working until the range is deleted.
//   - Node ports and the kept family's address are kept. When another
//     client's create takes one, or a kept offset's address, while the
//     Service is gone, the re-create takes another and the move is
//     Changed, naming each change (KeptChanges, offsetChanges): reported,
//     never silent, and never a Service left deleted for it.
//   - A Service that cannot be moved is left untouched: the dry run of its
//     re-create must pass first (a type, a scope or a full range the API
//     would refuse), a Service with finalizers is not deleted (its delete
//     would wait for their controller), and a delete whose preconditions fail
//     (the Service changed since it was read) deletes nothing.
//   - default/kubernetes is the API server's own: it re-creates it at the
//     first address of --service-cluster-ip-range, so it is never moved
//     here (docs/operations.md, "Replacing the default range", has the steps).
package renumber
