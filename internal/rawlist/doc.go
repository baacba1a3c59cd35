// Package rawlist serves a list of Services or IPAddresses to a client
// that reads protobuf from the bytes etcd holds, without decoding each
// object and encoding it again.
//
// A LIST answered as usual decodes every stored object (allocating its
// strings, maps and managedFields), then encodes it for the client: at a
// million Services and a million IPAddresses that is most of the server's
// CPU for a list, and the garbage its collector then marks. A stored
// object is already the protobuf message the client reads, but for its
// resourceVersion (etcd's revision of the key, never stored): an item here
// is the stored message with that one field added.
//
// Invariants:
//   - A client decodes from a list served here the objects it would decode
//     from the list served as usual: the same items in the same order, the
//     same resourceVersions, the same list metadata (the store's own
//     GetList reads the page, its limit, continue token and revision).
//   - An object the usual path would change on the way out is decoded and
//     encoded as usual: one stored in another version or as JSON, and a
//     Service the read defaults would change (servicealloc.ReadsAsStored).
//   - Only a request the usual path would answer in plain protobuf is
//     served here (WithNegotiation): JSON, YAML, tables and partial
//     metadata go the usual way, as do lists with a selector, lists from a
//     watch cache, and lists whose audit level records the response body.
//
// What differs: a field a newer kube-apiserver stored that this server's
// API types do not know is passed on where the usual decode drops it, and
// an object whose bytes do not decode fails the client's decode of the
// list where it would fail the server's.
package rawlist
