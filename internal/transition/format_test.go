package transition

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestFormat: what this release writes carries its format; what a release
// before formats wrote (no field) is read; a newer format is refused with a
// message naming both versions, never misread.
func TestFormat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	client := etcd.Client()
	l := etcdlayout.Layout{Prefix: prefix}

	c := join(t, ctx, client, string(model.IPAddress), "new")
	resp, err := client.Get(ctx, l.AllocatorState())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("state: %v %v", resp, err)
	}
	var stored map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &stored); err != nil {
		t.Fatal(err)
	}
	if stored["format"] != float64(Format) {
		t.Errorf("stored state %s: want format %d", resp.Kvs[0].Value, Format)
	}
	records, err := ListRecords(ctx, client, prefix, model.IPAddress)
	if err != nil || len(records) != 1 || records[0].Format != Format {
		t.Fatalf("records %+v, %v: want one of format %d", records, err, Format)
	}
	_ = c.Close(ctx)

	// A state and a record as a release before formats wrote them.
	if _, err := client.Put(ctx, l.AllocatorState(), `{"dualWrite":true,"changed":"2026-11-01T00:00:00Z","by":"old"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, l.AllocatorReplicasPrefix(string(model.Bitmap))+"old", `{"id":"old","model":"bitmap","dualWrite":true,"stateRevision":1,"started":"2026-11-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	if st, ok, err := ReadState(ctx, client, prefix); err != nil || !ok || !st.DualWrite || st.By != "old" {
		t.Errorf("an unversioned state: %+v %v %v", st, ok, err)
	}
	if rs, err := ListRecords(ctx, client, prefix, model.Bitmap); err != nil || len(rs) != 1 || rs[0].ID != "old" {
		t.Errorf("an unversioned record: %+v %v", rs, err)
	}

	// A newer release's state: refused by reads and by Join.
	if _, err := client.Put(ctx, l.AllocatorState(), `{"format":2,"dualWrite":false,"changed":"2027-01-01T00:00:00Z","by":"future","mode":"something new"}`); err != nil {
		t.Fatal(err)
	}
	_, _, err = ReadState(ctx, client, prefix)
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "the transition state has format 2 and this release reads formats up to 1") {
		t.Errorf("a newer state: %v", err)
	}
	if _, err := Join(ctx, Config{Client: client, Prefix: prefix, Model: model.IPAddress, ID: "r2", TTL: 2 * time.Second}); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("join over a newer state: %v", err)
	}

	// A newer release's record: refused by the listing that waits on records.
	if _, err := client.Put(ctx, l.AllocatorReplicasPrefix(string(model.Bitmap))+"future", `{"format":3,"id":"future","model":"bitmap"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := ListRecords(ctx, client, prefix, model.Bitmap); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("a newer record: %v", err)
	}
}
