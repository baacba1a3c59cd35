package apiserver

import (
	"errors"
	"testing"
)

func TestEtcdHistoryFollowedBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		seen, now etcdHistory
		restored  bool
	}{
		{"first read", etcdHistory{}, etcdHistory{clusterID: 7, revision: 100}, false},
		{"same position", etcdHistory{7, 100}, etcdHistory{7, 100}, false},
		{"forward", etcdHistory{7, 100}, etcdHistory{7, 250}, false},
		{"revision back (cold copy, snapshot restore)", etcdHistory{7, 250}, etcdHistory{7, 120}, true},
		{"another cluster (snapshot restore)", etcdHistory{7, 250}, etcdHistory{9, 900}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.seen.followedBy(tt.now)
			if got := errors.Is(err, ErrEtcdRestored); got != tt.restored {
				t.Errorf("followedBy = %v, restored %v, want %v", err, got, tt.restored)
			}
		})
	}
}
