// Package etcdhistory keeps a running process from acting on a past that
// etcd no longer has: etcd restored from a backup (or replaced) under it.
//
// After a restore every cache of the process describes writes etcd has
// forgotten: its informers, its free indexes, its cached bitmaps. Acting on
// them re-creates what the restore undid (an IPAddress for a Service only
// the cache still holds) or takes from a Service what it holds again. The
// process must stop and start over from what etcd holds now; until it has,
// none of its writes may land.
//
// A Marker is one process's key in etcd, a counter the process alone
// advances by compare-and-swap (Watch, once per interval). It knows what
// etcd must hold; a restore to any point before the last advance shows an
// older count, or no key at all.
//   - Watch also checks each answer's revision and cluster ID: a lower
//     revision, or another cluster, is a restore too. It reports a restore
//     through Restored.
//   - Guard wraps a clientv3.KV: every transaction, put and delete made
//     through it also compares the marker's version (its count) with the
//     count last confirmed, in the same transaction, so a write sent after
//     a restore is refused by etcd itself, with ErrRestored, and the
//     restore reported at once. The compare costs one more condition per
//     transaction and, on a failed compare, one more read.
//
// What cannot be told apart: a restore to a point after the last advance
// (a backup taken less than an interval before it) leaves the marker and
// the revision where the process last saw them. The writes of that last
// interval are then the only stale state; the conditional writes of the
// stores keep it from becoming a duplicate, and the repair frees what it
// leaks.
package etcdhistory
