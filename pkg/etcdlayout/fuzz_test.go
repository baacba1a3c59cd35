package etcdlayout

import (
	"testing"

	"github.com/allocator/allocator/internal/fixtures"
)

// FuzzDecode checks that no value, however broken, makes the decoders panic,
// and that whatever decodes can be encoded and decoded again.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{fixtures.Bitmap132, fixtures.IPAddress136} {
		for _, kv := range fixtures.Load(f, name).KVs {
			f.Add(kv.Value)
		}
	}
	golden := rangeAllocationBytes("10.0.0.0/24", []byte{0x02, 0x01})
	for _, seed := range [][]byte{
		nil,
		[]byte("k8s"),
		[]byte("k8s\x00"),
		golden,
		golden[:30],
		envelope("apps/v1", "Deployment", pbBytes(1, emptyObjectMeta)),
		envelope("v1", "", nil),
		[]byte(`{"kind":"RangeAllocation","apiVersion":"v1","range":"10.0.0.0/24","data":"AgE="}`),
		[]byte(`{"kind":"Service","apiVersion":"v1","spec":{"clusterIPs":["10.0.0.1"]}}`),
		[]byte(`{"kind":`),
		[]byte("k8s:enc:aescbc:v1:k:x"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := Decode(data)
		_, _ = DecodeRangeAllocation(data)
		_, _ = DecodeService(data)
		_, _ = DecodeIPAddress(data)
		_, _ = DecodeServiceCIDR(data)
		_, _ = DecodeNamespace(data)
		if err != nil {
			return
		}
		b, err := Encode(obj)
		if err != nil {
			t.Fatalf("decoded %T but cannot encode it: %v", obj, err)
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("cannot decode what Encode wrote for %T: %v", obj, err)
		}
	})
}
