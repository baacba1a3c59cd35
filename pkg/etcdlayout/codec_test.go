package etcdlayout

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The expected bytes below are written by hand from the protobuf field layout
// in testdata/README.md, never produced by the code under test.

// pbVarint appends v as a protobuf varint.
func pbVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// pbBytes is a length-delimited field (wire type 2).
func pbBytes(num int, payload []byte) []byte {
	b := pbVarint(nil, uint64(num)<<3|2)
	b = pbVarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func pbString(num int, s string) []byte { return pbBytes(num, []byte(s)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// emptyObjectMeta is what kube-apiserver writes for a RangeAllocation's
// metadata: name, generateName, namespace, selfLink, uid, resourceVersion
// (fields 1-6) empty, generation (7, varint) 0, creationTimestamp (8) an
// empty message. README: 0a00 1200 1a00 2200 2a00 3200 3800 4200.
var emptyObjectMeta = cat(
	pbString(1, ""), pbString(2, ""), pbString(3, ""), pbString(4, ""),
	pbString(5, ""), pbString(6, ""),
	[]byte{7 << 3 /* wire type 0, varint */, 0x00},
	pbBytes(8, nil),
)

// envelope is "k8s\x00" + runtime.Unknown{typeMeta, raw, "", ""}.
func envelope(apiVersion, kind string, raw []byte) []byte {
	return cat(
		[]byte("k8s\x00"),
		pbBytes(1, cat(pbString(1, apiVersion), pbString(2, kind))),
		pbBytes(2, raw),
		pbString(3, ""),
		pbString(4, ""),
	)
}

func rangeAllocationBytes(rangeSpec string, data []byte) []byte {
	return envelope("v1", "RangeAllocation", cat(
		pbBytes(1, emptyObjectMeta),
		pbString(2, rangeSpec),
		pbBytes(3, data),
	))
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandBuiltMatchesREADME(t *testing.T) {
	t.Parallel()
	// The exact 67-byte empty value v1.32.13 wrote at startup, as quoted in
	// the fixtures README, guards the hand-built helpers themselves.
	readme := mustHex(t, "6b387300 0a15 0a027631 120f 52616e6765416c6c6f636174696f6e "+
		"1222 0a10 0a0012001a0022002a00320038004200 120c 31302e39362e302e302f3136 1a00 "+
		"1a00 2200")
	if len(readme) != 67 {
		t.Fatalf("README value is %d bytes, want 67", len(readme))
	}
	if diff := cmp.Diff(readme, rangeAllocationBytes("10.96.0.0/16", nil)); diff != "" {
		t.Fatalf("hand-built bytes differ from the README (-readme +built):\n%s", diff)
	}
}

func TestRangeAllocationGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rangeSpec string
		data      []byte
		want      []byte
		wantData  []byte // what decoding gives back
	}{
		{
			name:      "10.0.0.0/24 with .1 and .10",
			rangeSpec: "10.0.0.0/24",
			data:      []byte{0x02, 0x01},
			// Written out field by field: 68 bytes.
			want: cat(
				[]byte("k8s\x00"),
				[]byte{0x0a, 0x15}, // typeMeta, 21 bytes
				[]byte{0x0a, 0x02}, []byte("v1"),
				[]byte{0x12, 0x0f}, []byte("RangeAllocation"),
				[]byte{0x12, 0x23}, // raw, 35 bytes
				[]byte{0x0a, 0x10, 0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00},
				[]byte{0x12, 0x0b}, []byte("10.0.0.0/24"),
				[]byte{0x1a, 0x02, 0x02, 0x01},
				[]byte{0x1a, 0x00, 0x22, 0x00}, // contentEncoding, contentType
			),
			wantData: []byte{0x02, 0x01},
		},
		{
			name:      "README: empty 10.96.0.0/16 at startup (67 bytes)",
			rangeSpec: "10.96.0.0/16",
			data:      nil,
			want: mustHex(t, "6b387300 0a15 0a027631 120f 52616e6765416c6c6f636174696f6e "+
				"1222 0a10 0a0012001a0022002a00320038004200 120c 31302e39362e302e302f3136 1a00 "+
				"1a00 2200"),
			wantData: []byte{},
		},
		{
			name:      "README: after kubernetes got 10.96.0.1",
			rangeSpec: "10.96.0.0/16",
			data:      []byte{0x01},
			want: mustHex(t, "6b387300 0a15 0a027631 120f 52616e6765416c6c6f636174696f6e "+
				"1223 0a10 0a0012001a0022002a00320038004200 120c 31302e39362e302e302f3136 1a01 01 "+
				"1a00 2200"),
			wantData: []byte{0x01},
		},
		{
			name:      "empty non-nil data is written the same as nil",
			rangeSpec: "10.96.0.0/16",
			data:      []byte{},
			want:      rangeAllocationBytes("10.96.0.0/16", nil),
			wantData:  []byte{},
		},
		{
			name:      "leading zero bytes are dropped",
			rangeSpec: "10.0.0.0/24",
			data:      []byte{0x00, 0x00, 0x02, 0x01},
			want:      rangeAllocationBytes("10.0.0.0/24", []byte{0x02, 0x01}),
			wantData:  []byte{0x02, 0x01},
		},
		{
			name:      "IPv6",
			rangeSpec: "fd00:10:96::/112",
			data:      []byte{0x80, 0x00, 0x01},
			want:      rangeAllocationBytes("fd00:10:96::/112", []byte{0x80, 0x00, 0x01}),
			wantData:  []byte{0x80, 0x00, 0x01},
		},
		{
			name:      "NodePorts",
			rangeSpec: "30000-32767",
			want:      rangeAllocationBytes("30000-32767", nil),
			wantData:  []byte{},
		},
		{
			name:      "long data needs a two-byte length",
			rangeSpec: "10.96.0.0/16",
			data:      append([]byte{0x20}, make([]byte, 200)...),
			want:      rangeAllocationBytes("10.96.0.0/16", append([]byte{0x20}, make([]byte, 200)...)),
			wantData:  append([]byte{0x20}, make([]byte, 200)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeRangeAllocation(tt.rangeSpec, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EncodeRangeAllocation (-want +got):\n%s", diff)
			}
			// Encode of the object gives the same bytes.
			got2, err := Encode(&corev1.RangeAllocation{Range: tt.rangeSpec, Data: bytes.TrimLeft(tt.data, "\x00")})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got2, tt.want) {
				t.Errorf("Encode differs from EncodeRangeAllocation")
			}
			ra, err := DecodeRangeAllocation(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			want := &corev1.RangeAllocation{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "RangeAllocation"},
				Range:    tt.rangeSpec,
				Data:     tt.wantData,
			}
			if diff := cmp.Diff(want, ra); diff != "" {
				t.Errorf("DecodeRangeAllocation (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncode(t *testing.T) {
	t.Parallel()
	svc := &corev1.Service{
		//lint:ignore SA1019 the test checks that Encode never stores selfLink
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "42", SelfLink: "/x"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.5", ClusterIPs: []string{"10.96.0.5"}},
	}
	orig := svc.DeepCopy()
	b, err := Encode(svc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(orig, svc); diff != "" {
		t.Errorf("Encode modified its argument:\n%s", diff)
	}
	if !bytes.HasPrefix(b, envelope("v1", "Service", nil)[:4+2+4+2+7]) {
		t.Errorf("envelope does not start with v1/Service: % x", b[:24])
	}
	got, err := DecodeService(b)
	if err != nil {
		t.Fatal(err)
	}
	want := orig.DeepCopy()
	want.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	//lint:ignore SA1019 the test checks that Encode never stores selfLink
	want.ResourceVersion, want.SelfLink = "", "" // never stored
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	// A stated apiVersion/kind must agree with the Go type.
	bad := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	if _, err := Encode(bad); err == nil || !strings.Contains(err.Error(), "v1/Pod") {
		t.Errorf("Encode(Service claiming v1/Pod) error = %v", err)
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) succeeded")
	}

	ip := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.5"},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "a"}},
	}
	b, err = Encode(ip)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b[:40], []byte("networking.k8s.io/v1")) || !bytes.Contains(b[:50], []byte("IPAddress")) {
		t.Errorf("IPAddress envelope: %q", b[:50])
	}
	if _, err := DecodeIPAddress(b); err != nil {
		t.Error(err)
	}
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		check func(t *testing.T, data []byte)
	}{
		{
			name:  "RangeAllocation",
			value: `{"kind":"RangeAllocation","apiVersion":"v1","metadata":{"creationTimestamp":null},"range":"10.0.0.0/24","data":"AgE="}` + "\n",
			check: func(t *testing.T, data []byte) {
				got, err := DecodeRangeAllocation(data)
				if err != nil {
					t.Fatal(err)
				}
				want := &corev1.RangeAllocation{
					TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "RangeAllocation"},
					Range:    "10.0.0.0/24",
					Data:     []byte{0x02, 0x01},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "Service with leading whitespace",
			value: "\n  " + `{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"b"},"spec":{"clusterIPs":["10.96.0.7","fd00::7"]}}`,
			check: func(t *testing.T, data []byte) {
				got, err := DecodeService(data)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"10.96.0.7", "fd00::7"}, got.Spec.ClusterIPs); diff != "" {
					t.Errorf("clusterIPs (-want +got):\n%s", diff)
				}
			},
		},
		{
			name:  "ServiceCIDR",
			value: `{"kind":"ServiceCIDR","apiVersion":"networking.k8s.io/v1","metadata":{"name":"kubernetes"},"spec":{"cidrs":["10.96.0.0/16"]}}`,
			check: func(t *testing.T, data []byte) {
				got, err := DecodeServiceCIDR(data)
				if err != nil {
					t.Fatal(err)
				}
				if got.Name != "kubernetes" || len(got.Spec.CIDRs) != 1 {
					t.Errorf("got %+v", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, []byte(tt.value)) })
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	golden := rangeAllocationBytes("10.0.0.0/24", []byte{0x02, 0x01})
	wrongMagic := append([]byte("k8t\x00"), golden[4:]...)
	tests := []struct {
		name  string
		value []byte
		want  []string // substrings of the error
	}{
		{"nil", nil, []string{"decode:", "empty value"}},
		{"magic only", []byte("k8s\x00"), []string{"nothing after the magic"}},
		{"partial magic", []byte("k8s"), []string{"truncated protobuf envelope", "3 bytes"}},
		{"truncated envelope", golden[:30], []string{"protobuf envelope (30 bytes)"}},
		{"truncated raw", golden[:len(golden)-6], []string{"protobuf envelope"}},
		{"wrong magic", wrongMagic, []string{"neither protobuf", "6b 38 74 00"}},
		{"garbage", []byte("\xff\xfe\x00garbage"), []string{"neither protobuf", "ff fe 00"}},
		{"broken JSON", []byte(`{"kind":`), []string{"JSON value"}},
		{"JSON without kind", []byte(`{"apiVersion":"v1"}`), []string{"JSON value", "Kind' is missing"}},
		{"JSON of an unknown kind", []byte(`{"apiVersion":"apps/v1","kind":"Deployment"}`), []string{"JSON value", "Deployment"}},
		{"envelope of an unknown kind", envelope("apps/v1", "Deployment", pbBytes(1, emptyObjectMeta)), []string{"protobuf envelope", "Deployment"}},
		{"envelope without kind", envelope("v1", "", nil), []string{"protobuf envelope", "Kind' is missing"}},
		{"raw not a message", envelope("v1", "RangeAllocation", []byte{0xff, 0xff, 0xff}), []string{"protobuf envelope"}},
		{"encrypted", []byte("k8s:enc:aescbc:v1:key1:\x01\x02"), []string{"encrypted at rest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := Decode(tt.value)
			if err == nil {
				t.Fatalf("Decode succeeded: %#v", obj)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			_, err = DecodeRangeAllocation(tt.value)
			if err == nil || !strings.HasPrefix(err.Error(), "decode RangeAllocation: ") {
				t.Errorf("DecodeRangeAllocation error = %v, want prefix %q", err, "decode RangeAllocation: ")
			}
		})
	}
	if _, err := Decode([]byte("k8s:enc:x")); !errors.Is(err, ErrEncrypted) {
		t.Errorf("encrypted value: error %v is not ErrEncrypted", err)
	}
}

func TestKindMismatch(t *testing.T) {
	t.Parallel()
	svc, err := Encode(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeRangeAllocation(svc)
	var km *KindMismatchError
	if !errors.As(err, &km) {
		t.Fatalf("error %v is not a *KindMismatchError", err)
	}
	if diff := cmp.Diff(&KindMismatchError{Want: KindRangeAllocation, Got: KindService}, km); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	const want = "decode RangeAllocation: value is v1/Service, want v1/RangeAllocation"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}

	const key = "/registry/ranges/serviceips"
	keyed := WithKey(key, err)
	if got := keyed.Error(); got != `etcd key "/registry/ranges/serviceips": `+want {
		t.Errorf("WithKey error = %q", got)
	}
	var ke *KeyError
	if !errors.As(keyed, &ke) || ke.Key != key || !errors.As(keyed, &km) {
		t.Errorf("WithKey error does not unwrap: %#v", keyed)
	}
	if WithKey(key, nil) != nil {
		t.Error("WithKey(key, nil) != nil")
	}

	ra, err := EncodeRangeAllocation("10.0.0.0/24", nil)
	if err != nil {
		t.Fatal(err)
	}
	typed := []struct {
		name   string
		decode func([]byte) error
		want   string
	}{
		{"Service", func(b []byte) error { _, err := DecodeService(b); return err }, "decode Service: value is v1/RangeAllocation, want v1/Service"},
		{"Namespace", func(b []byte) error { _, err := DecodeNamespace(b); return err }, "decode Namespace: value is v1/RangeAllocation, want v1/Namespace"},
		{"IPAddress", func(b []byte) error { _, err := DecodeIPAddress(b); return err }, "decode IPAddress: value is v1/RangeAllocation, want networking.k8s.io/v1/IPAddress"},
		{"ServiceCIDR", func(b []byte) error { _, err := DecodeServiceCIDR(b); return err }, "decode ServiceCIDR: value is v1/RangeAllocation, want networking.k8s.io/v1/ServiceCIDR"},
	}
	for _, tt := range typed {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.decode(ra); err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}
