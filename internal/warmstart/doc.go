// Package warmstart keeps an informer's store across a clean restart of
// the server: at shutdown, every object of the store and the resource
// version the store is at (a File); at the next start, those objects read
// back while the embedded etcd restores its index, so that the informer
// watches on from that version instead of listing every object again.
//
// A File is one informer's store, written once and read once:
//
//	magic, format version
//	the Token of the shutdown that wrote it
//	the store's resource version, its object count
//	each object: its length, its bytes (the caller's encoding)
//	a CRC-32C of everything before it
//
// Invariants, each with what it guards against:
//   - The objects are the store at exactly the resource version written
//     beside them, as etcd held them at that revision: the writer takes
//     them from a stopped informer that was not in the middle of a list.
//     Watching from that version then gives every change since, in order,
//     as it does after a list (k8s.io/client-go's list-then-watch).
//   - A File is used only with the etcd history it was written beside: the
//     Token names a key the shutdown wrote in etcd (its value and the
//     revision of that write), and Token.Check reads it back. An etcd
//     restored from a backup taken before that write lacks it, even with
//     its revisions bumped past the File's; one restored from a later
//     backup continues the same history, which the watch then replays.
//   - A File that is cut short or corrupt is refused as a whole (its
//     CRC); one that does not end is refused at its count. The reader
//     removes the file when it opens it, so a File is read at most once,
//     and a server killed after its start leaves none behind for the next.
//
// What a File costs when it is refused: the read and decode done beside
// etcd's restore, and nothing else; the informer lists as it would have.
package warmstart
