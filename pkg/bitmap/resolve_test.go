package bitmap

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestEtcdUnknownOutcomeSettledLater: a batch whose write and resolve both
// go unanswered within MinBatchTime fails with its outcome unknown, and the
// store settles it afterwards, leaving the map exactly as its callers were
// told: an allocation reported failed is not left set, a release reported
// failed is done. Both ways the write can end: landed late (every byte to
// etcd delayed 2.5 s: the write arrives, its cancellation a second later)
// and never landed (every byte to etcd dropped, then the connection cut).
func TestEtcdUnknownOutcomeSettledLater(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out etcd faults; not in -short")
	}
	const slot = 76
	delayed := faultproxy.Fault{Delay: 2500 * time.Millisecond, Direction: faultproxy.ToTarget}
	dropped := faultproxy.Fault{Drop: true, Direction: faultproxy.ToTarget}
	for _, tc := range []struct {
		name    string
		fault   faultproxy.Fault
		release bool // the faulted call releases slot (allocated first); else it allocates slot
		landed  bool
	}{
		{"allocation landed late", delayed, false, true},
		{"allocation never landed", dropped, false, false},
		{"release landed late", delayed, true, true},
		{"release never landed", dropped, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			etcd := etcdtest.New(t)
			proxy, client := etcd.Proxied(t)
			a := newTestStore(t, client, EtcdOptions{})
			if _, err := a.Create(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.release {
				if err := a.AllocateSlot(ctx, slot); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := a.Usage(ctx); err != nil { // the cache is loaded: the faulted call only writes
				t.Fatal(err)
			}
			history := etcd.Client().Watch(ctx, testKey, clientv3.WithRev(etcdRevision(t, ctx, etcd.Client())+1))

			proxy.Set(tc.fault)
			call, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			var err error
			if tc.release {
				err = a.ReleaseSlot(call, slot)
			} else {
				err = a.AllocateSlot(call, slot)
			}
			cancel()
			if !errors.As(err, new(*outcomeUnknown)) {
				t.Fatalf("call under %v: %v; want its outcome unknown", tc.fault, err)
			}
			if allocation.IsRetriable(err) {
				t.Fatalf("an unknown outcome is marked retriable: %v", err)
			}
			proxy.Set(faultproxy.Fault{})
			if tc.fault.Drop {
				proxy.Cut() // the client reconnects; delayed bytes still go, in order
			}

			// Within the settle window the map holds slot no more (else a
			// leak) and the store counts the write settled.
			deadline := time.Now().Add(settleWindow)
			for {
				slots, _ := storedSlots(t, etcd.Client())
				if !slices.Contains(slots, slot) && a.Stats().Settled == 1 {
					break
				}
				if time.Now().After(deadline) || a.Stats().Unsettled > 0 {
					t.Fatalf("%s after the unknown outcome: stored %v (want without %d), %+v", settleWindow, slots, slot, a.Stats())
				}
				time.Sleep(50 * time.Millisecond)
			}
			// The history says which way the write ended: set by the faulted
			// allocation, or cleared by the faulted release itself.
			if got := faultedWriteLanded(t, history, slot, tc.release); got != tc.landed {
				t.Fatalf("the faulted write landed: %v, want %v (the fault did not do what the case needs)", got, tc.landed)
			}
		})
	}
}

func etcdRevision(t *testing.T, ctx context.Context, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// faultedWriteLanded reads the map's history since the fault, up to the
// present map, and reports whether the faulted write landed: for an
// allocation, some value held slot; for a release, the first change cleared
// slot and was not the settle's fence (which writes the map it found back
// unchanged) followed by a second release.
func faultedWriteLanded(t *testing.T, history clientv3.WatchChan, slot int, release bool) bool {
	t.Helper()
	var values [][]byte
	timeout := time.After(10 * time.Second)
	for {
		select {
		case resp := <-history:
			for _, ev := range resp.Events {
				values = append(values, ev.Kv.Value)
			}
		case <-timeout:
			t.Fatalf("map history after the fault: %d changes, want at least one", len(values))
		}
		if len(values) > 0 && !holds(t, values[len(values)-1], slot) {
			break
		}
	}
	if release {
		// Landed: the release itself is the first change. Not landed: the
		// fence writes the map back with slot still set, then the settle
		// releases it.
		return !holds(t, values[0], slot)
	}
	return slices.ContainsFunc(values, func(v []byte) bool { return holds(t, v, slot) })
}

// holds decodes a stored map and reports whether it holds slot.
func holds(t *testing.T, value []byte, slot int) bool {
	t.Helper()
	ra, err := etcdlayout.DecodeRangeAllocation(value)
	if err != nil {
		t.Fatal(err)
	}
	bits, err := bitset.New(testSpace.Slots(), testSpace.StaticSlots())
	if err != nil {
		t.Fatal(err)
	}
	if err := bits.SetBytes(ra.Data); err != nil {
		t.Fatal(err)
	}
	return bits.Has(slot)
}
