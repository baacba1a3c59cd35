// Package etcdlayout is how kube-apiserver lays out Service-allocation data in
// etcd: the keys (Layout) and the value codec (Encode, Decode and the typed
// helpers).
//
// Keys follow kube-apiserver's etcd3 store: the prefix is path.Join("/",
// prefix) followed by the resource path, so "/registry", "registry" and
// "/registry/" all give "/registry/ranges/serviceips". The zero Layout uses
// DefaultPrefix; use Prefix "/" to store at the root of the keyspace. Names
// are used as given: validating them (canonical IPs, DNS labels) is the
// caller's job, and a name containing "/" would address a different key.
//
// Values are what kube-apiserver writes with its default storage media type:
// the 4-byte magic "k8s\x00" followed by a runtime.Unknown protobuf message
// {typeMeta{apiVersion, kind}, raw, contentEncoding "", contentType ""}, where
// raw is the object's own protobuf message. Encode produces exactly those
// bytes (checked against values captured from kube-apiserver 1.32 and 1.36 in
// the tests): it sets apiVersion/kind from the object's Go type and, like
// kube-apiserver's storage, never stores resourceVersion or selfLink (the
// revision lives in etcd's mod_revision). A RangeAllocation's data is always
// written, as an empty field when nothing is allocated.
//
// Decode reads the protobuf envelope and JSON values (kube-apiserver run with
// --storage-media-type=application/json). Decoded objects have apiVersion and
// kind set. Values encrypted at rest ("k8s:enc:" prefix) are reported as such:
// reading them needs the kube-apiserver's encryption configuration.
//
// Errors name what was being decoded ("decode RangeAllocation: ..."); a value
// of another kind is a *KindMismatchError naming both kinds. The etcd key is
// the caller's knowledge: wrap with WithKey to add it.
//
// The package holds one scheme (core/v1 and networking.k8s.io/v1), built at
// initialisation and never modified afterwards, so every function is safe for
// concurrent use.
package etcdlayout
