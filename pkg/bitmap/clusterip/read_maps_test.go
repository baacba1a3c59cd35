package clusterip

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestReadStoredIPMaps: the one reader of the stored ClusterIP maps (the
// status command, the invariant checks and ExistingBitmapStores use it)
// returns each map that exists, primary first, on the range it records, and
// refuses a value that is no map of a usable range.
func TestReadStoredIPMaps(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t).Client()
	encode := func(rangeSpec string, data ...byte) string {
		value, err := etcdlayout.EncodeRangeAllocation(rangeSpec, data)
		if err != nil {
			t.Fatal(err)
		}
		return string(value)
	}
	// read is what a test compares of one map: its key's last element, its
	// range and its allocated addresses.
	type read struct {
		Key   string
		Range string
		IPs   []string
	}
	for i, tc := range []struct {
		name      string
		primary   string // the stored value; "" for no key
		secondary string
		want      []read
		wantErr   string
	}{
		{name: "nothing stored"},
		{name: "primary only", primary: encode("10.0.0.0/24", 0b0000_0110),
			want: []read{{"serviceips", "10.0.0.0/24", []string{"10.0.0.2", "10.0.0.3"}}}},
		{name: "dual stack, primary first", primary: encode("fd00::/120"), secondary: encode("10.0.0.0/24", 0b1),
			want: []read{{"serviceips", "fd00::/120", nil}, {"secondaryserviceips", "10.0.0.0/24", []string{"10.0.0.1"}}}},
		{name: "a secondary map without a primary one", secondary: encode("10.0.0.0/24"),
			want: []read{{"secondaryserviceips", "10.0.0.0/24", nil}}},
		{name: "not a RangeAllocation", primary: "garbage", wantErr: "serviceips"},
		{name: "range that is no prefix", primary: encode("10.0.0.1"), wantErr: "range"},
		{name: "range too wide for a bitmap", primary: encode("10.0.0.0/8"), wantErr: "serviceips"},
		{name: "more bits than the range has", primary: encode("10.0.0.0/30", 0, 0xff), wantErr: "serviceips"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			layout := etcdlayout.Layout{Prefix: fmt.Sprintf("/read-%d", i)}
			for key, value := range map[string]string{layout.PrimaryServiceIPRange(): tc.primary, layout.SecondaryServiceIPRange(): tc.secondary} {
				if value == "" {
					continue
				}
				if _, err := etcd.Put(ctx, key, value); err != nil {
					t.Fatal(err)
				}
			}
			maps, err := ReadStoredIPMaps(ctx, etcd, layout)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadStoredIPMaps: %v, want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []read
			for _, m := range maps {
				r := read{Key: m.Key[strings.LastIndex(m.Key, "/")+1:], Range: m.Range.Prefix().String()}
				if err := m.Map.ForEach(ctx, func(ip netip.Addr) { r.IPs = append(r.IPs, ip.String()) }); err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("maps (-want +got):\n%s", diff)
			}
		})
	}
}
