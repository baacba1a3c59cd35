// Package ipallocator is the one place that turns the ClusterIP allocator
// model's name into code. Open builds, for the model a server runs,
// everything that model needs: each family's allocator, the bitmaps it
// writes (its own, or dual-written during a model transition), its repair
// controller, the other model's repair while dual write is on, and the
// carry-over of the other model's allocations at start-up. The jobs beside
// a running cluster reach it the same way: Detect resolves "auto",
// OpenExisting and OpenRepair return a Backend over what the cluster already
// stores (its Usage, its repairs), Migrate carries the allocations to a
// model. The server and the CLI hold the Backend; neither switches on the
// model nor asserts allocator types to find a store.
//
// The models themselves live in the card's rooms: pkg/ipaddress (IPAddress
// objects over ServiceCIDRs) and pkg/ipaddress/dualwrite (the IPAddress model
// that also writes the bitmap while bitmap-model writers may be live, and the
// bitmap model's replica that writes IPAddresses), pkg/bitmap/clusterip (the
// bitmap model's allocators, on pkg/bitmap's store), pkg/repair/iprepair (the
// repairs and migrations of both models).
//
// Invariants and why:
//   - The bitmaps a Backend reports are exactly the ones its allocators
//     write, recorded when they are built, never recovered from a decorated
//     allocator afterwards: a wrapper (metrics, a test's slow allocator)
//     must not make the repair lose sight of a map.
//   - A bitmap-model replica in a transition trusts the bitmap only after
//     every live IPAddress-model replica dual-writes (internal/transition);
//     CarryOver waits for that before it writes the IPAddresses into the
//     maps, so the start-up carry-over cannot miss an address.
//   - Without etcd the allocators are in-memory bitmaps: nothing is stored,
//     so there is nothing to repair or carry over, and the host must re-mark
//     the stored Services before it opens them.
package ipallocator
