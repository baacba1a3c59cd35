// Package protowalk reads protobuf messages field by field, as views of
// their bytes: the server's readers of stored objects (internal/slim,
// internal/rawlist) take the few fields they need from an encoded
// Kubernetes object without decoding the rest.
package protowalk

import "google.golang.org/protobuf/encoding/protowire"

// Field reads one field of b: its number, its wire type, its value (a
// length-delimited field's bytes, a varint's own encoding, as a view of b)
// and what follows it.
func Field(b []byte) (protowire.Number, protowire.Type, []byte, []byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, 0, nil, nil, protowire.ParseError(n)
		}
		return num, typ, v, b[n:], nil
	}
	n = protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, 0, nil, nil, protowire.ParseError(n)
	}
	return num, typ, b[:n], b[n:], nil
}

// Varint is the value of a varint field's encoding (Field's value of a
// VarintType field).
func Varint(b []byte) uint64 {
	v, _ := protowire.ConsumeVarint(b)
	return v
}
