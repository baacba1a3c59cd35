// Package slim decodes stored Services and IPAddresses into the compact
// form their readers need, and makes that form from decoded objects: a
// Service keeps the fields the allocators, repairs and carry-over read
// (Service), an IPAddress every field but its managedFields and the
// Service UID annotation (IPAddress), its labels shared with every other
// allocator's IPAddress of its family (CompactIPAddress).
//
// The server's informers keep each object in this form, and decode it
// straight from etcd's bytes (DecodeService, DecodeIPAddress: a walk of
// the protobuf that reads only what is kept). The repair job reads the
// objects of its pass from etcd the same way (StoredService,
// StoredIPAddress). Bytes the walk does not read (JSON, an older version,
// anything not well formed) are decoded in full and then made compact, so
// that both paths give one answer.
package slim
