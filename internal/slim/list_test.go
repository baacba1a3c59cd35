package slim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/mutate"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// listSeeds are the stored seeds' objects as an API server lists them: a
// ServiceList and an IPAddressList in protobuf, each with a continue token
// and a remaining count.
func listSeeds(t testing.TB) (services, ipAddresses []byte) {
	storedServices, storedIPAddresses := storedSeeds(t)
	remaining := int64(7)
	meta := metav1.ListMeta{ResourceVersion: "4242", Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", RemainingItemCount: &remaining}
	svcList := &corev1.ServiceList{ListMeta: meta}
	for _, data := range storedServices {
		svc, err := etcdlayout.DecodeService(data)
		if err != nil {
			t.Fatal(err)
		}
		svc.ResourceVersion = fmt.Sprint(100 + len(svcList.Items))
		svcList.Items = append(svcList.Items, *svc)
	}
	ipList := &networkingv1.IPAddressList{ListMeta: meta}
	for _, data := range storedIPAddresses {
		ipa, err := etcdlayout.DecodeIPAddress(data)
		if err != nil {
			t.Fatal(err)
		}
		ipList.Items = append(ipList.Items, *ipa)
	}
	var err error
	if services, err = etcdlayout.Encode(svcList); err != nil {
		t.Fatal(err)
	}
	if ipAddresses, err = etcdlayout.Encode(ipList); err != nil {
		t.Fatal(err)
	}
	return services, ipAddresses
}

// decodedList is a list's items and metadata.
type decodedList[T any] struct {
	Items []T
	Meta  metav1.ListMeta
}

// fullServiceList decodes a ServiceList in full and makes each item as the
// walk does: defaulted as an API server serves it, then slim.
func fullServiceList(data []byte) (decodedList[*corev1.Service], error) {
	obj, err := etcdlayout.Decode(data)
	if err != nil {
		return decodedList[*corev1.Service]{}, err
	}
	list, ok := obj.(*corev1.ServiceList)
	if !ok {
		return decodedList[*corev1.Service]{}, fmt.Errorf("a %T", obj)
	}
	out := decodedList[*corev1.Service]{Meta: list.ListMeta}
	for i := range list.Items {
		setDefaults(&list.Items[i])
		out.Items = append(out.Items, Service(&list.Items[i]))
	}
	return out, nil
}

func fullIPAddressList(data []byte) (decodedList[*networkingv1.IPAddress], error) {
	obj, err := etcdlayout.Decode(data)
	if err != nil {
		return decodedList[*networkingv1.IPAddress]{}, err
	}
	list, ok := obj.(*networkingv1.IPAddressList)
	if !ok {
		return decodedList[*networkingv1.IPAddress]{}, fmt.Errorf("a %T", obj)
	}
	out := decodedList[*networkingv1.IPAddress]{Meta: list.ListMeta}
	for i := range list.Items {
		out.Items = append(out.Items, IPAddress(&list.Items[i]))
	}
	return out, nil
}

func walkServiceList(data []byte) (decodedList[*corev1.Service], bool) {
	items, meta, ok := DecodeServiceList(data)
	return decodedList[*corev1.Service]{Items: items, Meta: meta}, ok
}

func walkIPAddressList(data []byte) (decodedList[*networkingv1.IPAddress], bool) {
	items, meta, ok := DecodeIPAddressList(data)
	return decodedList[*networkingv1.IPAddress]{Items: items, Meta: meta}, ok
}

// checkList: when the walk reads data and the full decode decodes it, both
// give one answer (a walk that refuses leaves data to the full decode).
func checkList[T any](t *testing.T, data []byte, walk func([]byte) (decodedList[T], bool), full func([]byte) (decodedList[T], error)) {
	t.Helper()
	got, ok := walk(data)
	if !ok {
		return
	}
	want, err := full(data)
	if err != nil {
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%q (-full +walk):\n%s", data, diff)
	}
}

// TestDecodeLists: the walk reads a ServiceList and an IPAddressList as an
// API server sends them in protobuf, every item and the list's metadata as
// the full decode gives them once made slim (an allocator's IPAddresses
// sharing their family's labels); it leaves JSON, another kind and a cut
// list to the full decode.
func TestDecodeLists(t *testing.T) {
	t.Parallel()
	services, ipAddresses := listSeeds(t)
	svcs, ok := walkServiceList(services)
	if !ok {
		t.Fatal("the walk did not read a ServiceList")
	}
	want, err := fullServiceList(services)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, svcs); diff != "" {
		t.Errorf("ServiceList (-full +walk):\n%s", diff)
	}
	if len(svcs.Items) != 5 || svcs.Meta.Continue == "" || svcs.Meta.RemainingItemCount == nil || *svcs.Meta.RemainingItemCount != 7 {
		t.Errorf("ServiceList: %d items, metadata %+v; want 5 and the continue token with 7 remaining", len(svcs.Items), svcs.Meta)
	}
	if svcs.Items[1].Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("an item served without a type: %q, want the API server's default ClusterIP", svcs.Items[1].Spec.Type)
	}
	ips, ok := walkIPAddressList(ipAddresses)
	if !ok {
		t.Fatal("the walk did not read an IPAddressList")
	}
	wantIPs, err := fullIPAddressList(ipAddresses)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantIPs, ips); diff != "" {
		t.Errorf("IPAddressList (-full +walk):\n%s", diff)
	}
	if !sameMap(ips.Items[0].Labels, SharedLabels("IPv4")) || ips.Items[0].ManagedFields != nil {
		t.Errorf("an allocator's IPAddress: labels %v (shared: %v), managedFields %v; want its family's shared labels and none",
			ips.Items[0].Labels, sameMap(ips.Items[0].Labels, SharedLabels("IPv4")), ips.Items[0].ManagedFields)
	}

	asJSON, err := json.Marshal(&corev1.ServiceList{Items: []corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"JSON": asJSON, "an IPAddressList read as Services": ipAddresses, "a ServiceList cut short": services[:len(services)-3],
	} {
		if _, ok := walkServiceList(data); ok {
			t.Errorf("%s: the walk read it, want it left to the full decode", name)
		}
	}
}

// TestDecodeListsMutated: on mutated lists the walk gives what the full
// decode gives whenever both read the bytes.
func TestDecodeListsMutated(t *testing.T) {
	t.Parallel()
	services, ipAddresses := listSeeds(t)
	r := rand.New(rand.NewPCG(21, 22))
	for range 20_000 {
		checkList(t, mutate.Bytes(r, [][]byte{services}), walkServiceList, fullServiceList)
		checkList(t, mutate.Bytes(r, [][]byte{ipAddresses}), walkIPAddressList, fullIPAddressList)
	}
}

func FuzzDecodeServiceList(f *testing.F) {
	services, _ := listSeeds(f)
	f.Add(services)
	f.Fuzz(func(t *testing.T, data []byte) { checkList(t, data, walkServiceList, fullServiceList) })
}

func FuzzDecodeIPAddressList(f *testing.F) {
	_, ipAddresses := listSeeds(f)
	f.Add(ipAddresses)
	f.Fuzz(func(t *testing.T, data []byte) { checkList(t, data, walkIPAddressList, fullIPAddressList) })
}
