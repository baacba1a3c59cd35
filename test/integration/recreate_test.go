package integration

import (
	"context"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
)

// TestCreateExistingKeepsItsAllocations: a Service created again under a
// name already taken is answered as kube-apiserver answers it (asking for
// the existing Service's own address or node port: 422 "already
// allocated"; anything else: 409), and neither answer costs the existing
// Service what it holds nor leaves behind what the refused create picked,
// with refused creates racing each other. Checked in etcd, in both models.
func TestCreateExistingKeepsItsAllocations(t *testing.T) {
	t.Parallel()
	forEachModel(t, testCreateExistingKeepsItsAllocations)
}

func testCreateExistingKeepsItsAllocations(t *testing.T, model string) {
	ctx := testContext(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: model})
	c := srv.client
	svcs := c.CoreV1().Services(metav1.NamespaceDefault)
	const ip, port = "10.0.0.10", 30010
	mine := nodePortService("a", corev1.ServiceTypeNodePort, tcp(80, port))
	withIP(ip)(mine)
	if _, err := svcs.Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err := svcs.Create(ctx, mine, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create a again with its own address and port: %v, want 422 already allocated", err)
	}
	sameIPOnly := nodePortService("a", corev1.ServiceTypeNodePort, tcp(80, 0))
	withIP(ip)(sameIPOnly)
	if _, err := svcs.Create(ctx, sameIPOnly, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create a again with its own address: %v, want 422 already allocated", err)
	}
	samePortOnly := nodePortService("a", corev1.ServiceTypeNodePort, tcp(80, port))
	if _, err := svcs.Create(ctx, samePortOnly, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create a again with its own node port: %v, want 422 already allocated", err)
	}
	// Dynamic re-creates, racing: each picks an address and a node port,
	// gets 409 and must give both back.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svcs.Create(ctx, nodePortService("a", corev1.ServiceTypeNodePort, tcp(80, 0)), metav1.CreateOptions{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !apierrors.IsAlreadyExists(err) {
			t.Errorf("dynamic create of a again: %v, want 409", err)
		}
	}

	got, err := svcs.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.ClusterIP != ip || got.Spec.Ports[0].NodePort != port {
		t.Errorf("a holds %s and %d, want %s and %d", got.Spec.ClusterIP, got.Spec.Ports[0].NodePort, ip, port)
	}
	// What etcd holds: the API server's own default/kubernetes (10.0.0.1)
	// and a's address; a's node port alone.
	want := []string{"10.0.0.1", ip}
	if held := heldClusterIPs(t, ctx, srv.etcd, model); !slices.Equal(held, want) {
		t.Errorf("ClusterIPs held in etcd (%s model): %v, want %v", model, held, want)
	}
	expectHeld(t, ctx, srv.etcd, port)
}

// heldClusterIPs lists the IPv4 ClusterIPs the model's own records hold in
// etcd: the IPAddress objects (IPAddress model, each checked to name its
// Service), or the bits of the RangeAllocation (bitmap model).
func heldClusterIPs(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, model string) []string {
	t.Helper()
	var held []string
	if model == "ipaddress" {
		resp, err := etcd.Client().Get(ctx, "/registry/ipaddresses/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			obj, err := etcdlayout.DecodeIPAddress(kv.Value)
			if err != nil {
				t.Fatalf("%s: %v", kv.Key, err)
			}
			if obj.Spec.ParentRef == nil || obj.Spec.ParentRef.Resource != "services" {
				t.Errorf("IPAddress %s has parentRef %+v", obj.Name, obj.Spec.ParentRef)
			}
			held = append(held, obj.Name)
		}
		slices.Sort(held)
		return held
	}
	key := etcdlayout.Layout{}.PrimaryServiceIPRange()
	resp, err := etcd.Client().Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	set := 0
	for _, b := range ra.Data {
		set += bits.OnesCount8(b)
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.10"} {
		if bitSet(t, ra, ip) {
			held = append(held, ip)
		}
	}
	if set != len(held) {
		t.Errorf("the map has %d bits set, %v among them", set, held)
	}
	return held
}

// TestStaleIPAddressKeepsNoBit: in the bitmap model a Service's release
// keeps the bit of its address when an IPAddress of another Service holding
// the address exists, but not when the IPAddress names a Service that does
// not hold it. Such an IPAddress is what the servers' repair leaves, for a
// moment, when it creates one for a Service deleted meanwhile (its
// IPAddress is taken back right after): here one names an earlier Service
// "c". The next Service asking for the address must get it, as from
// kube-apiserver, not "already allocated" until the repair runs. (Whether
// an IPAddress's Service holds the address is judged in
// TestDeleteOwnedTellsStaleFromHeld, pkg/ipaddress.)
func TestStaleIPAddressKeepsNoBit(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: string(model.Bitmap)})
	svcs := srv.client.CoreV1().Services(metav1.NamespaceDefault)
	ip := netip.MustParseAddr("10.0.0.10")
	withStatic := withIP(ip.String())

	first, err := svcs.Create(ctx, newService("c", withStatic), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := svcs.Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The IPAddress the repair created for the first "c" after its delete.
	// The server's own repair may have made it already, racing the delete
	// as this test stages: then it is the same stale object.
	owner := allocation.Owner{Namespace: metav1.NamespaceDefault, Name: "c"}
	// Or it has made it and taken it back between the create and the read:
	// then the create is tried again.
	stale := ipaddress.NewObject(ip, allocation.Owner{Namespace: owner.Namespace, Name: owner.Name, UID: string(first.UID)})
	for attempt := 1; ; attempt++ {
		_, err := srv.client.NetworkingV1().IPAddresses().Create(ctx, stale, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		got, gerr := srv.client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) && attempt < 3 {
			continue
		}
		if gerr != nil || !ipaddress.OwnedBy(got, owner) {
			t.Fatalf("IPAddress %s exists and does not name the deleted c: %+v, %v", ip, got, gerr)
		}
		break
	}
	if _, err := svcs.Create(ctx, newService("c", withStatic), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create c again with %s (its bit is free): %v", ip, err)
	}
	if err := svcs.Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svcs.Create(ctx, newService("d", withStatic), metav1.CreateOptions{}); err != nil {
		t.Errorf("create d with %s after c let it go: %v, want it allocated", ip, err)
	}
}
