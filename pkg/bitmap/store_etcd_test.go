package bitmap

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

const testKey = "/registry/ranges/serviceips"

// slotSpace is a Space whose slots mean nothing in particular. testSpace has
// the shape of the ClusterIP range 10.0.0.0/24: 254 slots, 16 of them
// static, so its maps are byte for byte that range's.
type slotSpace struct {
	spec          string
	slots, static int
}

func (s slotSpace) Spec() string               { return s.spec }
func (s slotSpace) Slots() int                 { return s.slots }
func (s slotSpace) StaticSlots() int           { return s.static }
func (s slotSpace) Matches(stored string) bool { return stored == s.spec }

var testSpace = slotSpace{spec: "10.0.0.0/24", slots: 254, static: 16}

func newTestStore(t testing.TB, client *clientv3.Client, opts EtcdOptions) *Store {
	t.Helper()
	s, err := NewStore(client, testKey, testSpace, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// storedSlots decodes the value at testKey and lists the slots it holds.
func storedSlots(t testing.TB, client *clientv3.Client) ([]int, int64) {
	t.Helper()
	resp, err := client.Get(context.Background(), testKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d kvs)", testKey, err, len(resp.Kvs))
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("decode %s: %v", testKey, err)
	}
	if ra.Range != testSpace.Spec() {
		t.Fatalf("stored range %q, want %s", ra.Range, testSpace.Spec())
	}
	bits, err := bitset.New(testSpace.Slots(), testSpace.StaticSlots())
	if err != nil {
		t.Fatal(err)
	}
	if err := bits.SetBytes(ra.Data); err != nil {
		t.Fatalf("restore stored value: %v", err)
	}
	var slots []int
	bits.ForEach(func(i int) { slots = append(slots, i) })
	return slots, resp.Kvs[0].ModRevision
}
