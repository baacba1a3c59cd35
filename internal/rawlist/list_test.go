package rawlist

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/protowalk"
)

// testService is a Service as a server writes it: every default set.
func testService(name string) *corev1.Service {
	cluster, single := corev1.ServiceInternalTrafficPolicyCluster, corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
			Labels: map[string]string{"app": name}, CreationTimestamp: metav1.Unix(1_700_000_000, 0),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.9", ClusterIPs: []string{"10.0.0.9"},
			SessionAffinity: corev1.ServiceAffinityNone, InternalTrafficPolicy: &cluster,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &single,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func marshal(t testing.TB, obj interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := obj.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodedWithRV is what the usual path serves of msg at rev: msg decoded,
// its resourceVersion set.
func decodedWithRV(msg []byte, rev uint64) (*corev1.Service, error) {
	var svc corev1.Service
	if err := svc.Unmarshal(msg); err != nil {
		return nil, err
	}
	svc.ResourceVersion = ""
	if rev != 0 {
		svc.ResourceVersion = strconv.FormatUint(rev, 10)
	}
	return &svc, nil
}

// metadataLast returns msg with its metadata field moved to its end.
func metadataLast(t *testing.T, msg []byte) []byte {
	t.Helper()
	var meta, rest []byte
	for b := msg; len(b) > 0; {
		num, _, _, next, err := protowalk.Field(b)
		if err != nil {
			t.Fatal(err)
		}
		field := b[:len(b)-len(next)]
		if num == metadataField {
			meta = append(meta, field...)
		} else {
			rest = append(rest, field...)
		}
		b = next
	}
	return append(rest, meta...)
}

func TestWithResourceVersion(t *testing.T) {
	t.Parallel()
	stale := testService("stale")
	stale.ResourceVersion = "7" // stored with one: the revision wins
	noMeta := testService("x")
	noMeta.ObjectMeta = metav1.ObjectMeta{}
	cases := map[string][]byte{
		"a Service":                         marshal(t, testService("web")),
		"a resourceVersion stored":          marshal(t, stale),
		"empty metadata":                    marshal(t, noMeta),
		"no metadata field at all":          marshal(t, &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}),
		"an empty message":                  {},
		"metadata after the other fields":   metadataLast(t, marshal(t, testService("a"))),
		"a field no API type here knows":    protowire.AppendString(protowire.AppendTag(marshal(t, testService("u")), 99, protowire.BytesType), "x"),
		"a resourceVersion longer than 127": marshal(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: string(make([]byte, 200))}}),
	}
	for name, msg := range cases {
		for _, rev := range []uint64{0, 1, 123456789012} {
			got, ok := withResourceVersion(msg, rev)
			if !ok {
				t.Fatalf("%s at %d: refused: %q", name, rev, msg)
			}
			want, err := decodedWithRV(msg, rev)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := decodedWithRV(got, rev)
			if err != nil {
				t.Fatalf("%s at %d: the result does not decode: %v", name, rev, err)
			}
			var direct corev1.Service
			if err := direct.Unmarshal(got); err != nil || direct.ResourceVersion != want.ResourceVersion {
				t.Errorf("%s at %d: resourceVersion %q, want %q (%v)", name, rev, direct.ResourceVersion, want.ResourceVersion, err)
			}
			if !apiequality.Semantic.DeepEqual(dec, want) {
				t.Errorf("%s at %d: decodes to\n%+v\nwant\n%+v", name, rev, dec, want)
			}
		}
	}
	twice := append(marshal(t, testService("a")), marshal(t, testService("b"))...)
	if _, ok := withResourceVersion(twice, 5); ok {
		t.Error("metadata given twice (merged by protobuf) was not refused")
	}
	if v, ok := versionedAt(nil, 5); !ok || v.msg == nil {
		t.Error("an empty message is not served as stored")
	}
	if _, ok := withResourceVersion([]byte{0x0a, 0x05, 0x01}, 5); ok {
		t.Error("a truncated message was not refused")
	}
	// Metadata whose last field claims more bytes than it holds: the
	// field added after it would complete it.
	if _, ok := withResourceVersion([]byte("\n\x052\x0500"), 17); ok {
		t.Error("metadata whose last field is truncated was not refused")
	}
}

// FuzzWithResourceVersion: whatever bytes it is given, withResourceVersion
// either refuses them or returns a message that decodes as the bytes do,
// with the revision as resourceVersion.
func FuzzWithResourceVersion(f *testing.F) {
	f.Add(marshal(f, testService("web")), uint64(42))
	f.Add([]byte{}, uint64(0))
	f.Add(marshal(f, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.1", ResourceVersion: "3"}}), uint64(9))
	f.Fuzz(func(t *testing.T, msg []byte, rev uint64) {
		got, ok := withResourceVersion(msg, rev)
		if !ok {
			return
		}
		if v, _ := versionedAt(msg, rev); v.size() != len(got) {
			t.Fatalf("size %d, the message written %d bytes", v.size(), len(got))
		}
		want, err := decodedWithRV(msg, rev)
		dec, decErr := decodedWithRV(got, rev)
		if (err == nil) != (decErr == nil) {
			t.Fatalf("the bytes decode: %v, the result: %v", err, decErr)
		}
		if err != nil {
			return
		}
		var direct corev1.Service
		if err := direct.Unmarshal(got); err != nil || direct.ResourceVersion != want.ResourceVersion {
			t.Fatalf("resourceVersion %q, want %q (%v)", direct.ResourceVersion, want.ResourceVersion, err)
		}
		if !apiequality.Semantic.DeepEqual(dec, want) {
			t.Fatalf("decodes to\n%+v\nwant\n%+v", dec, want)
		}
	})
}

func TestResponse(t *testing.T) {
	t.Parallel()
	web, old := testService("web"), testService("old")
	webMsg, ok := versionedAt(marshal(t, web), 11)
	if !ok {
		t.Fatal("versionedAt refused a Service")
	}
	old.ResourceVersion = "12"
	remaining := int64(3)
	list := &List{
		ListMeta: metav1.ListMeta{ResourceVersion: "20", Continue: "token", RemainingItemCount: &remaining},
		Items:    []Item{{stored: webMsg}, {Object: old}},
	}
	var decorated []string
	resp, err := list.Response(corev1.SchemeGroupVersion.WithKind("ServiceList"), func(obj runtime.Object) {
		svc := obj.(*corev1.Service)
		decorated = append(decorated, svc.Name)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.APIVersion != "v1" || resp.Kind != "ServiceList" || resp.ContentType != "" || resp.ContentEncoding != "" {
		t.Errorf("envelope %+v, want v1 ServiceList, no content type or encoding", resp.TypeMeta)
	}
	var got corev1.ServiceList
	if err := got.Unmarshal(resp.Raw); err != nil {
		t.Fatal(err)
	}
	web.ResourceVersion = "11"
	old.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	want := corev1.ServiceList{ListMeta: list.ListMeta, Items: []corev1.Service{*web, *old}}
	if !apiequality.Semantic.DeepEqual(&got, &want) {
		t.Errorf("the response decodes to\n%+v\nwant\n%+v", got, want)
	}
	if diff := cmp.Diff([]string{"old"}, decorated); diff != "" {
		t.Errorf("decorated (-want +got):\n%s", diff)
	}

	empty, err := (&List{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}).Response(networkingv1.SchemeGroupVersion.WithKind("IPAddressList"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var none networkingv1.IPAddressList
	if err := none.Unmarshal(empty.Raw); err != nil || none.ResourceVersion != "5" || len(none.Items) != 0 {
		t.Errorf("an empty list decodes to %+v (%v)", none, err)
	}
}
