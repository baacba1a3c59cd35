// Package iprepair finds and fixes ClusterIP allocations that disagree with the
// Services: addresses allocated that no Service holds (leaks), addresses
// Services hold that are not allocated, and Services whose addresses are
// invalid, out of range or shared. It also migrates between the two models.
//
// # Bitmap repair
//
// BitmapRepair rebuilds each family's RangeAllocation from the Services and
// writes it back. The leak counting, the merged compare-and-swap write and
// the re-read of a Service before its missing bit is set are
// pkg/repair's, the one core the node-port repair (NodePortRepair) uses
// too; BitmapRepair.RunOnce drives it step by step (read the maps, list the
// Services, hand the core what each holds, word the findings with upstream's
// texts, finish) and is one pass read top to bottom. Invariants and why:
//
//   - The stored maps are read before the Services are listed. An allocation
//     is written before its Service (kube-apiserver does the same), so an
//     address allocated after the read is simply not in the map, and one
//     allocated before it whose Service is still being stored looks leaked
//     to this pass only.
//   - Hence a leaked address is freed only on the third consecutive pass that
//     sees it, and no sooner than LeakGrace after the first such pass (passes
//     can run back to back: reruns, a one-shot job run in a loop). A pass that
//     finds it in use again forgets the count. LeakGrace (repair.Options)
//     defaults to repair.DefaultLeakGrace (RequestTimeout 60 s + 30 s),
//     because a create may hold a reserved address for up to the request
//     timeout before its Service is stored (admission webhooks run in
//     between on kube-apiserver). And once the grace is over the address is
//     freed only when every write lease alive then has ended
//     (Options.InFlight): a write whose answer was lost may land until its
//     lease ends (design.md §7).
//   - The write is a compare-and-swap on the map's ModRevision. A concurrent
//     allocation makes it fail; the pass's changes (addresses to set, confirmed
//     leaks to clear) are then merged onto a fresh read and written with a new
//     compare-and-swap, a read and a write with nothing in between, so the
//     pass makes progress at any create rate (rebuilding from a new Service
//     list every time lost every race under sustained creates). A bit set
//     since the read is a create in flight and is kept; a confirmed leak is
//     cleared only if still set. A Service whose missing bit the merge would
//     set is read again first: one deleted since the list gets no bit and no
//     ClusterIPNotAllocated. Leak counts, events and metrics are committed
//     only with a successful write, so a rerun counts nothing twice. An
//     unchanged map is not rewritten. A missing map is created.
//   - Addresses Services hold but the map lacks are re-marked
//     (ClusterIPNotAllocated). Duplicates (ClusterIPAlreadyAllocated: the
//     older Service keeps the address), out-of-range (ClusterIPOutOfRange)
//     and unparsable addresses or unserved families (ClusterIPNotValid) are
//     reported as events on the Service and never changed: only a person can
//     decide which Service to recreate.
//   - Dry-run reads, reports and changes nothing: no write, no event, no leak
//     counting.
//
// # IPAddress repair
//
// IPAddressRepair makes every ClusterIP inside some ServiceCIDR have an
// IPAddress with parentRef {"" services ns name} and the family and
// managed-by labels (creating missing ones is the bitmap → IPAddress
// migration). The unit of work is one address. Reads come from a snapshot
// and never justify a write alone: creates are preceded by a fresh read of
// the Service and are create-if-absent; deletes need an IPAddress older than
// OrphanGrace (the leak grace, because the allocator claims before the
// Service is stored) with every write lease alive when that grace was first
// seen over ended since (Options.InFlight), fresh reads that still find no
// owner, and UID+resourceVersion preconditions. parentRef is immutable, so a wrong one
// is fixed by conditional delete + create only under the same rules, and a
// lost race is reported, never overwritten. IPAddresses managed by others
// are never written. Shared, out-of-range and invalid ClusterIPs are
// reported on the Service and never changed.
//
// Each address is judged by reconcile (ipaddress_reconcile.go) on its
// cases, as upstream's repairip.go draws them. "Owner" is the IPAddress's
// parentRef; "-" means the column does not matter. Writes happen only on
// IPAddresses managed by ipallocator.k8s.io (other ones are reported and
// left), never in dry run, and only after the fresh reads and grace period
// of IPAddressRepair's invariants.
//
//	case               Service has IP  IPAddress  owner  in range  action (event)                                     function
//	-----------------  --------------  ---------  -----  --------  -------------------------------------------------  -------------------------------
//	ok                 yes             yes        yes    yes       none; a wrong family label is set right            judgeExisting, fixFamilyLabel
//	missing IPAddress  yes             no         -      yes       create it for the Service (ClusterIPNotAllocated;  createMissing
//	                                                               none when carried over from the bitmap model)
//	wrong owner        yes             yes        no     yes       delete and re-create it for the holder             repoint
//	                                                               (IPAddressWrongReference if the parent exists,
//	                                                               else ClusterIPNotAllocated)
//	duplicate          two Services    -          -      yes       the referenced (else oldest) one keeps it; the     reconcileHeld, duplicateProblem
//	                                                               others get ClusterIPAlreadyAllocated, unchanged
//	leaked             no              yes        -      -         delete it (IPAddressNotAllocated, or               reconcileOrphan, pendingOrphan
//	                                                               IPAddressWrongReference if the parent exists)
//	out of range       yes             -          -      no        report; no IPAddress (ClusterIPOutOfRange)         reconcile
//	out of scope       yes             -          -      yes       report; the address stays (ClusterIPOutOfScope)    noteOutOfScope
//	not valid          unparsable      -          -      -         report; no change (ClusterIPNotValid)              reconcile
//
// # Migration
//
// MigrateToIPAddress and MigrateToBitmap carry allocations between the
// models. Both are idempotent and resumable (create-if-absent claims; a CAS
// union into the bitmap), change no owner, verify at the end, and refuse
// rather than drop: an address the target cannot hold is reported and, for
// the bitmap, nothing is written.
package iprepair
