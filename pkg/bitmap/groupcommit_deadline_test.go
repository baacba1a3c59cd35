package bitmap

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestEtcdShortDeadlinesLeakNothing stresses group commit on real etcd with
// callers whose deadlines are 0–3 ms, on a /24, for a few seconds, with
// reliable releases keeping the range from filling up. Afterwards the stored
// map must hold exactly the addresses whose AllocateNext returned success and
// that were not released: a set bit nobody was told about is a leak, a
// success whose bit is missing would be a duplicate waiting to happen, and no
// address may be handed out twice while held. Before the batch had a floor
// on its time, nearly every write timed out after it may have landed and the
// whole /24 leaked within seconds.
func TestEtcdShortDeadlinesLeakNothing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	r := bitmapRange(t, "10.0.0.0/24")
	a := newEtcdAllocator(t, etcd.Client(), "10.0.0.0/24", EtcdOptions{})
	if _, err := a.Initialize(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		mu            sync.Mutex
		held          = map[netip.Addr]bool{} // guarded by mu
		successes     int                     // guarded by mu
		lateSuccesses int                     // succeeded after the caller's own deadline; guarded by mu
		failures      int                     // guarded by mu
	)
	const workers = 24
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for time.Now().Before(stop) && ctx.Err() == nil {
				mu.Lock()
				var victim netip.Addr
				if len(held) > 200 {
					for ip := range held {
						victim = ip
						break
					}
					delete(held, victim)
				}
				mu.Unlock()
				if victim.IsValid() {
					// Releases are reliable here (no deadline) so the
					// bookkeeping stays exact.
					if err := a.Release(ctx, victim, allocation.Owner{}); err != nil {
						t.Errorf("release %s: %v", victim, err)
						return
					}
					continue
				}
				deadline := time.Duration(rnd.IntN(3001)) * time.Microsecond
				cctx, cancel := context.WithTimeout(ctx, deadline)
				ip, err := a.AllocateNext(cctx, allocation.Owner{})
				late := cctx.Err() != nil
				cancel()
				mu.Lock()
				if err == nil {
					if held[ip] {
						mu.Unlock()
						t.Errorf("%s handed out twice", ip)
						return
					}
					held[ip] = true
					successes++
					if late {
						lateSuccesses++
					}
				} else {
					failures++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	stored, _ := storedIPs(t, etcd.Client(), r)
	storedSet := map[netip.Addr]bool{}
	for _, ip := range stored {
		storedSet[ip] = true
	}
	var leaked, missing []netip.Addr
	for ip := range storedSet {
		if !held[ip] {
			leaked = append(leaked, ip)
		}
	}
	for ip := range held {
		if !storedSet[ip] {
			missing = append(missing, ip)
		}
	}
	t.Logf("%d successes (%d after the caller's deadline), %d failures, %d held, stats %+v",
		successes, lateSuccesses, failures, len(held), a.Stats())
	if len(leaked) > 0 || len(missing) > 0 {
		t.Fatalf("stored map disagrees with the callers: %d leaked (set, no caller told) e.g. %v; %d missing (told success, not set) e.g. %v",
			len(leaked), first(leaked), len(missing), first(missing))
	}
	if successes == 0 || lateSuccesses == 0 {
		t.Fatalf("the stress did not exercise short deadlines: %d successes, %d after the deadline", successes, lateSuccesses)
	}
}

func first(ips []netip.Addr) []netip.Addr { return ips[:min(len(ips), 5)] }

// TestEtcdResolveAmbiguousWrite drives resolve, the leader's answer to an
// etcd transaction that failed after it may have landed, through its three
// cases on real etcd.
func TestEtcdResolveAmbiguousWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	r := bitmapRange(t, "10.0.0.0/24")
	client := etcd.Client()

	// prepare returns an allocator whose cache holds slot 5 applied on top
	// of the stored map, as the leader's does when its write fails, with the
	// base map, the value it tried to write and the operations (value and
	// stamp) that write was.
	prepare := func(t *testing.T) (*EtcdAllocator, mapState, []int, []byte, []clientv3.Op, string) {
		t.Helper()
		if _, err := client.Delete(ctx, testKey); err != nil {
			t.Fatal(err)
		}
		a := newEtcdAllocator(t, client, "10.0.0.0/24", EtcdOptions{})
		if _, err := a.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.load(ctx); err != nil {
			t.Fatal(err)
		}
		base := mapState{rev: a.rev, stamp: a.stamp}
		changed := a.apply([]*request{{kind: opAllocate, slot: 5}})
		value, err := etcdlayout.EncodeRangeAllocation(r.Prefix().String(), a.bits.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		ops, stamp := a.putOps(value)
		return a, base, changed, value, ops, stamp
	}
	casWrite := func(t *testing.T, rev int64, ops []clientv3.Op) {
		t.Helper()
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", rev)).Then(ops...).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("cas write at %d: %v %v", rev, err, resp)
		}
	}
	casPut := func(t *testing.T, rev int64, value []byte) {
		t.Helper()
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", rev)).
			Then(clientv3.OpPut(testKey, string(value))).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("cas put at %d: %v %v", rev, err, resp)
		}
	}
	slot5 := netip.MustParseAddr("10.0.0.6")

	t.Run("not landed: fenced", func(t *testing.T) {
		a, base, changed, value, _, stamp := prepare(t)
		landed, err := a.resolve(base, changed, value, stamp)
		if err != nil || landed {
			t.Fatalf("resolve = %v, %v; want not landed", landed, err)
		}
		// The lost write can never land now.
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", base.rev)).
			Then(clientv3.OpPut(testKey, string(value))).Commit()
		if err != nil || resp.Succeeded {
			t.Fatalf("the write landed after the fence: %v %v", err, resp)
		}
		if ips, _ := storedIPs(t, client, r); len(ips) != 0 {
			t.Fatalf("stored %v, want nothing", ips)
		}
	})

	t.Run("landed, then overwritten", func(t *testing.T) {
		a, base, changed, value, ops, stamp := prepare(t)
		casWrite(t, base.rev, ops) // our write landed...
		_, rev := storedIPs(t, client, r)
		other, err := NewAllocator(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = other.Allocate(ctx, slot5, allocation.Owner{})
		_ = other.Allocate(ctx, netip.MustParseAddr("10.0.0.9"), allocation.Owner{})
		_, data := other.Snapshot()
		later, err := etcdlayout.EncodeRangeAllocation(r.Prefix().String(), data)
		if err != nil {
			t.Fatal(err)
		}
		casPut(t, rev, later) // ...and another replica wrote on top of it
		landed, err := a.resolve(base, changed, value, stamp)
		if err != nil || !landed {
			t.Fatalf("resolve = %v, %v; want landed", landed, err)
		}
		if !a.bits.Has(5) {
			t.Fatalf("cache lost the landed slot")
		}
	})

	// Another instance picked the same free slot from the same base: its
	// map is byte for byte ours, its stamp is not. Taking its write for ours
	// would hand slot 5 out twice.
	t.Run("another writer's identical map won", func(t *testing.T) {
		a, base, changed, value, _, stamp := prepare(t)
		theirs, _ := a.putOps(value) // same value, a stamp of its own
		casWrite(t, base.rev, theirs)
		landed, err := a.resolve(base, changed, value, stamp)
		if err != nil || landed {
			t.Fatalf("resolve = %v, %v; want not landed", landed, err)
		}
	})

	t.Run("another write won", func(t *testing.T) {
		a, base, changed, value, _, stamp := prepare(t)
		other, err := NewAllocator(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = other.Allocate(ctx, netip.MustParseAddr("10.0.0.9"), allocation.Owner{})
		_, data := other.Snapshot()
		theirs, err := etcdlayout.EncodeRangeAllocation(r.Prefix().String(), data)
		if err != nil {
			t.Fatal(err)
		}
		casPut(t, base.rev, theirs)
		landed, err := a.resolve(base, changed, value, stamp)
		if err != nil || landed {
			t.Fatalf("resolve = %v, %v; want not landed", landed, err)
		}
	})
}
