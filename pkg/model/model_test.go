package model

import (
	"context"
	"testing"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in        string
		allowAuto bool
		want      Name
		wantErr   bool
	}{
		{"bitmap", false, Bitmap, false},
		{"ipaddress", true, IPAddress, false},
		{"auto", true, Auto, false},
		{"auto", false, "", true},
		{"Bitmap", true, "", true},
		{"", true, "", true},
	} {
		got, err := Parse(tt.in, tt.allowAuto)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q, %v) = %q, %v", tt.in, tt.allowAuto, got, err)
		}
	}
}

// TestDetect runs on a real etcd: no map is the IPAddress model, either
// family's map is the bitmap model, and a named model is kept as given.
func TestDetect(t *testing.T) {
	ctx := context.Background()
	etcd := etcdtest.New(t)
	kv := etcd.Client()
	const prefix = "/registry"
	detect := func(n Name) Name {
		t.Helper()
		got, err := Detect(ctx, n, kv, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := detect(Auto); got != IPAddress {
		t.Errorf("no map: %q, want ipaddress", got)
	}
	if got, _ := Detect(ctx, Auto, nil, prefix); got != IPAddress {
		t.Errorf("no etcd: %q, want ipaddress", got)
	}
	l := etcdlayout.Layout{Prefix: prefix}
	if _, err := kv.Put(ctx, l.SecondaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	if got := detect(Auto); got != Bitmap {
		t.Errorf("secondary map only: %q, want bitmap", got)
	}
	if got := detect(IPAddress); got != IPAddress {
		t.Errorf("named model changed to %q", got)
	}
	if _, err := kv.Delete(ctx, l.SecondaryServiceIPRange()); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, l.PrimaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	if found, err := BitmapExists(ctx, kv, prefix); err != nil || !found {
		t.Errorf("primary map: %v, %v", found, err)
	}
	if found, err := BitmapExists(ctx, kv, "/other"); err != nil || found {
		t.Errorf("another prefix: %v, %v", found, err)
	}
}
