// Package repair finds and fixes what the allocation maps and the Services
// disagree on (design.md §8). It holds the one repair core of every map
// stored as a RangeAllocation (Repairer, Pass), the node-port repair on it
// (NodePortRepair, nodeports.go), and below it iprepair (the ClusterIP
// repairs of both models and the migrations between them) and report (what
// every repair reports).
//
// The core is generic over the key of the thing allocated (Key: an address
// or a port); a Space (AddrSpace, PortSpace) maps keys to the map's slots.
// Every repair's settings are one Options, which each repair's config
// embeds; Options.WithDefaults is the one place their defaults are applied.
//
// A layer drives the core step by step and the core calls nothing of the
// layer's, so one pass of a layer reads top to bottom in one function
// (NodePortRepair.RunOnce, iprepair.BitmapRepair.RunOnce):
//
//	rounds := NewRounds(maps)              // bounds the reruns after lost writes
//	for rounds.Next() {
//	    for each map i of rounds.Pending():
//	        pass := repairer.Begin(ctx)     // read the map, before the list
//	    services := list the Services
//	    for each map i of rounds.Pending():
//	        for each key each Service holds (internal/holding):
//	            switch pass.Hold(svc, key)  // Held, Missing, Duplicate, OutOfRange:
//	                                        // the layer words the finding
//	        for _, leak := range pass.Leaks() // kept and counted, or Freed:
//	                                        // the layer words the finding
//	        done, err := pass.Finish(ctx, &findings, reporting)
//	        if rounds.Lost(i, err) { continue } // map i is passed over again
//	}
//	rounds.Err()                           // gave up after MaxConflictReruns rounds
//
// Finish commits (merging onto a fresh read and reading Services again as
// below) and only then counts the findings and records their events,
// without the findings of keys the commit found were not missing; a dry run
// commits, counts and records nothing.
//
// A pass reads the stored map, then lists the Services, rebuilds the map from
// what they hold and writes it back. Invariants and why:
//
//   - The map is read before the Services are listed. An allocation is
//     written before its Service, so a key allocated after the read is simply
//     not in the map, and one allocated before it whose Service is still
//     being stored looks leaked to this pass only.
//   - Hence a key allocated with no Service is freed only on the LeakPasses-th
//     consecutive pass that sees it, and no sooner than the leak grace after
//     the first such pass (passes can run back to back: reruns, a one-shot
//     job run in a loop). A pass that finds it held again forgets the count.
//   - The write is a compare-and-swap on the ModRevision the pass read. When a
//     concurrent allocation wins, the pass's changes (keys to set, confirmed
//     leaks to clear) are merged onto a fresh read and written with a new
//     compare-and-swap, a read and a write with nothing in between, so a pass
//     makes progress at any create rate (rebuilding from a new Service list
//     every time lost every race under sustained creates). A bit set since
//     the read is a create in flight and is kept; a confirmed leak is cleared
//     only if still set (it has been allocated with no Service for longer
//     than any create holds a reservation unstored, so nobody is about to use
//     it).
//   - Before a key a Service holds is set again on a fresh map, the Service is
//     read again: if it is gone (or recreated with another UID, or no longer
//     holds the key), it was deleted between the pass's list and its write and
//     its release already cleared the bit, so setting it would leave a stale
//     bit and report a false "not allocated". Whether it still holds the
//     key is internal/holding's answer, as for the list. Such keys, and keys
//     found already set in the fresh map, are returned as NotMissing, and
//     Finish drops their findings. Each Service is read again at most once
//     per key and pass.
//   - Leak counts are committed only with a successful write (or when the
//     map needed none), so a pass rerun after a lost write counts nothing
//     twice. An unchanged map is not rewritten; a missing map is created.
//   - A pass whose merged write still loses MaxMergeAttempts times in a row,
//     or whose map was deleted meanwhile, fails with bitmap.ErrConflict;
//     Rounds then has that map passed over again from a fresh read and list,
//     in at most MaxConflictReruns rounds in all.
//
// # Node ports
//
// NodePortRepair follows the bitmap repair's rules with ports for addresses
// (and upstream's node-port repair for reasons and texts): a port allocated
// with no Service is freed on the LeakPasses-th consecutive pass that sees it
// and no sooner than LeakGrace after the first; a port a Service holds that
// the map lacks is set again (PortNotAllocated); two Services on one port
// (PortAlreadyAllocated) and ports outside the range (PortOutOfRange) are
// reported, never changed. The node-port map is the same in both IP models,
// so IP-model migration never touches it.
package repair
