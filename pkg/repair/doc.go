// Package repair finds and fixes ClusterIP allocations that disagree with the
// Services: addresses allocated that no Service holds (leaks), addresses
// Services hold that are not allocated, and Services whose addresses are
// invalid, out of range or shared. It also migrates between the two models.
//
// # Bitmap repair
//
// BitmapRepair rebuilds each family's RangeAllocation from the Services and
// writes it back. Invariants and why:
//
//   - The stored maps are read before the Services are listed. An allocation
//     is written before its Service (kube-apiserver does the same), so an
//     address allocated after the read is simply not in the map, and one
//     allocated before it whose Service is still being stored looks leaked
//     to this pass only.
//   - Hence a leaked address is freed only on the third consecutive pass that
//     sees it, and no sooner than LeakGrace after the first such pass (passes
//     can run back to back: reruns, a one-shot job run in a loop). A pass that
//     finds it in use again forgets the count.
//   - The write is a compare-and-swap on the map's ModRevision. A concurrent
//     allocation makes it fail; the family's pass is then rerun from fresh
//     reads, and leak counts, events and metrics are committed only with a
//     successful write, so a rerun counts nothing twice. An unchanged map is
//     not rewritten. A missing map is created.
//   - Addresses Services hold but the map lacks are re-marked
//     (ClusterIPNotAllocated). Duplicates (ClusterIPAlreadyAllocated: the
//     older Service keeps the address), out-of-range (ClusterIPOutOfRange)
//     and unparsable addresses or unserved families (ClusterIPNotValid) are
//     reported as events on the Service and never changed: only a person can
//     decide which Service to recreate.
//   - Dry-run reads, reports and changes nothing: no write, no event, no leak
//     counting.
package repair
