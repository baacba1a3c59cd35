package bitmap

import (
	"slices"
	"testing"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestStaleCacheAfterRestore: etcd is restored from a cold backup (its
// revision goes back) under a store whose cached map was written after
// the backup. Another store writes the restored map at exactly the
// revision the stale cache holds. The stale store's next allocation must
// not write its cache back over that map: it would drop the other
// store's slot (to be handed out again) and put back three the
// restore undid. With the revision compare alone it does.
func TestStaleCacheAfterRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out two etcd restarts (cold backup, restore); runs in the full suite")
	}
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	stale := newTestStore(t, etcd.NewClient(t), EtcdOptions{})
	if _, err := stale.Create(ctx); err != nil {
		t.Fatal(err)
	}
	backup := etcd.ColdBackup(t)
	for range 3 { // undone by the restore; the stale cache keeps them
		if _, err := stale.AllocateNextSlot(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cached := stale.rev

	etcd.RestoreColdBackup(t, backup)
	client := etcd.Client()
	for {
		resp, err := client.Get(ctx, "/filler")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision >= cached-1 {
			if resp.Header.Revision != cached-1 {
				t.Fatalf("setup: the restored etcd is at revision %d, past %d", resp.Header.Revision, cached-1)
			}
			break
		}
		if _, err := client.Put(ctx, "/filler", "x"); err != nil {
			t.Fatal(err)
		}
	}
	fresh := newTestStore(t, etcd.NewClient(t), EtcdOptions{})
	freshSlot, err := fresh.AllocateNextSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, rev := storedSlots(t, client); rev != cached {
		t.Fatalf("setup: the restored map is at revision %d, want the stale cache's %d", rev, cached)
	}

	staleSlot, err := stale.AllocateNextSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slots, _ := storedSlots(t, client)
	if staleSlot == freshSlot || len(slots) != 2 || !slices.Contains(slots, freshSlot) || !slices.Contains(slots, staleSlot) {
		t.Fatalf("after the restore: allocated slot %d, then %d from the stale cache; etcd holds %v, want exactly those two",
			freshSlot, staleSlot, slots)
	}
}
