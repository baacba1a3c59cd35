package apiserver

import (
	"context"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"github.com/allocator/allocator/internal/listhold"
)

// heldLists is a resource's etcd store whose paged lists hold their
// revision while they are read: every page whose answer continues touches
// the list's revision in holds, so that etcd's compaction leaves it
// readable for the next page (internal/listhold).
// It keeps the presized store's other methods (rawlist.Source, Stats).
type heldLists struct {
	*presizedLists
	holds *listhold.Holds
}

// GetList is the store's GetList; an answer with a continue token holds
// its resourceVersion.
func (s heldLists) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if err := s.presizedLists.GetList(ctx, key, opts, listObj); err != nil {
		return err
	}
	list, err := meta.ListAccessor(listObj)
	if err != nil || list.GetContinue() == "" {
		return nil
	}
	if rev, err := strconv.ParseInt(list.GetResourceVersion(), 10, 64); err == nil {
		s.holds.Touch(rev)
	}
	return nil
}

// holdLists gives the stores of getter the server's list holds and its
// compaction interval: every page of a paged list holds its revision, and
// the compactor compacts no further than the holds of every server.
func (c CompletedConfig) holdLists(s *Server, getter *restOptionsGetter) {
	getter.base.CompactionInterval = compactsEvery(c.CompactionInterval)
	getter.stores.holds = s.listHolds.Holds()
	getter.stores.holdCompaction = s.listHolds.Guard
}
