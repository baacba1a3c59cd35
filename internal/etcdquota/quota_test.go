package etcdquota

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestExceeded(t *testing.T) {
	t.Parallel()
	services := schema.GroupResource{Resource: "services"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"client error value", rpctypes.ErrNoSpace, true},
		{"client error value wrapped", fmt.Errorf("write of /registry/services/specs/a/b: %w", rpctypes.ErrNoSpace), true},
		{"raw gRPC status", rpctypes.ErrGRPCNoSpace, true},
		// What the generic registry's storage answers: the text inside an
		// API status, the error value gone.
		{"API status with the text", apierrors.NewInternalError(errors.New("etcdserver: mvcc: database space exceeded")), true},
		{"text only", errors.New("etcdserver: mvcc: database space exceeded"), true},
		{"other etcd error", rpctypes.ErrCompacted, false},
		{"other etcd error wrapped", fmt.Errorf("read: %w", rpctypes.ErrTimeout), false},
		{"context ended", context.DeadlineExceeded, false},
		{"conflict", apierrors.NewConflict(services, "a", errors.New("the object has been modified")), false},
		{"other text", errors.New("database space is fine"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Exceeded(tc.err); got != tc.want {
				t.Errorf("Exceeded(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
