package bitmap

import (
	"slices"
	"testing"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestStaleCacheAfterRestore: etcd is restored from a cold backup (its
// revision goes back) under an allocator whose cached map was written after
// the backup. Another allocator writes the restored map at exactly the
// revision the stale cache holds. The stale allocator's next allocation must
// not write its cache back over that map: it would drop the other
// allocator's address (to be handed out again) and put back three the
// restore undid. With the revision compare alone it does.
func TestStaleCacheAfterRestore(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	r := bitmapRange(t, "10.0.0.0/24")
	stale := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/24", EtcdOptions{})
	if _, err := stale.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	backup := etcd.ColdBackup(t)
	for range 3 { // undone by the restore; the stale cache keeps them
		if _, err := stale.AllocateNext(ctx, owner); err != nil {
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
	fresh := newEtcdAllocator(t, etcd.NewClient(t), "10.0.0.0/24", EtcdOptions{})
	freshIP, err := fresh.AllocateNext(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, rev := storedIPs(t, client, r); rev != cached {
		t.Fatalf("setup: the restored map is at revision %d, want the stale cache's %d", rev, cached)
	}

	staleIP, err := stale.AllocateNext(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	ips, _ := storedIPs(t, client, r)
	if staleIP == freshIP || len(ips) != 2 || !slices.Contains(ips, freshIP) || !slices.Contains(ips, staleIP) {
		t.Fatalf("after the restore: allocated %s, then %s from the stale cache; etcd holds %v, want exactly those two",
			freshIP, staleIP, ips)
	}
}
