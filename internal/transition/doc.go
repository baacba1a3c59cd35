// Package transition coordinates the two ClusterIP allocator models across
// every replica that shares one etcd, so that switching models replica by
// replica, rolling back, or running beside a kube-apiserver of either model
// never hands out one address twice.
//
// # The rule
//
// A replica of the bitmap model sees only the bitmap (the RangeAllocation);
// a replica of the IPAddress model sees only IPAddress objects. Two replicas
// that look at different records give the same address to two Services,
// and under concurrent creates they do so often. So while any bitmap-model
// writer may be live, every IPAddress-model replica *dual-writes*: it claims
// the bit (compare-and-swap, as a bitmap replica would) before it creates
// the IPAddress, and frees both on release. The bitmap then holds every address
// of both models and the bitmap replicas stay safe; the IPAddress replicas
// are safe because they claim the bit first, as kube-apiserver 1.31–1.33
// did.
//
// # The state
//
// One key, <prefix>/clusterip-allocator/state, says whether dual write is
// on. It is created once, by the first replica that finds it missing: on
// when a bitmap already exists (a cluster that ran the bitmap model, e.g.
// a kube-apiserver ≤ 1.32, is being taken over) or when that replica runs
// the bitmap model; off on a fresh IPAddress-model cluster, which never had
// a bitmap. The naive operator path — change --allocator on one replica,
// restart it, then the next — therefore needs no extra step: the state is
// on from the first replica of the old cluster, and stays on until an
// operator ends the transition.
//
// # Replicas
//
// Every replica keeps a record at <prefix>/clusterip-allocator/replicas/
// <model>/<id>, attached to an etcd lease (TTL, default 15 s) that it keeps
// alive; a replica killed without a clean stop disappears when its lease
// expires. The record says whether the replica dual-writes and which
// revision of the state it has acted on.
//
//   - Ending the transition (Finish) writes "off" in one transaction that
//     also requires that no bitmap-model record exists, so it cannot race
//     a bitmap replica that is starting: either the replica's record is
//     first and Finish fails, or Finish is first and the replica, which
//     reads the state only after writing its record, refuses to start.
//   - A bitmap replica starts allocating only after every live
//     IPAddress-model record reports dual write at the current state
//     revision (after a Resume, replicas flip when their watch delivers
//     the change; the flip waits for allocations begun under the old mode
//     to finish, so an acknowledgement covers everything before it).
//   - A replica allocates only while its own lease is fresh: one that was
//     frozen (or cut off from etcd) for longer than the lease may have been
//     forgotten by the others, so before its next allocation it registers
//     again and re-reads the state. This is what makes the rules above hold
//     for a replica paused by SIGSTOP or a long GC, not only for a dead one.
//
// Writers we cannot see — a kube-apiserver, or a replica of an older
// version of this program — keep no record. Finish therefore also refuses,
// unless forced, while a kube-apiserver identity lease in kube-system is
// live or the bitmap holds addresses that no IPAddress holds.
package transition
