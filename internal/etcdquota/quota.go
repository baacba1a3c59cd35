// Package etcdquota recognises etcd's refusal of a write for its space
// quota: "mvcc: database space exceeded", raised with the NOSPACE alarm.
//
// etcd gives that answer once it has applied or refused the write (a write
// that takes the database past its quota is applied and still answered so),
// so a read after it is final: the callers read the write's marker or the
// object back to learn which it was, where after a lost answer they could
// not.
//
// The error reaches its callers two ways: from the etcd client, where it is
// rpctypes.ErrNoSpace, and through the apiserver's
// storage and REST layers, which turn it into an API status carrying only
// the text. Exceeded recognises both.
package etcdquota

import (
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// text is the part of etcd's message that every form of the error keeps:
// "etcdserver: mvcc: database space exceeded" from the client, wrapped in an
// API status's message after the apiserver.
const text = "database space exceeded"

// Exceeded reports whether err is etcd's "database space exceeded": the
// client's error value (rpctypes.ErrNoSpace, however wrapped), or an error
// that carries its text because it crossed an API boundary (an API status,
// the raw gRPC status). Exceeded(nil) is false.
func Exceeded(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, rpctypes.ErrNoSpace) || strings.Contains(err.Error(), text)
}
