package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestServesUpstreamData starts the server on etcd data written by a real
// kube-apiserver and checks it serves those objects and never hands out an
// address that upstream allocated.
func TestServesUpstreamData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fixture string
		model   string
	}{
		{fixtures.Bitmap132, string(model.Bitmap)},
		// 1.33 stored IPAddress and ServiceCIDR as networking.k8s.io/v1beta1
		// and dual-wrote the bitmap.
		{fixtures.IPAddress133, string(model.IPAddress)},
		{fixtures.IPAddress136, string(model.IPAddress)},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			f := fixtures.Load(t, tc.fixture)
			etcd := etcdtest.New(t)
			ctx := testContext(t)
			if _, err := fixtures.Put(ctx, etcd.Client(), f); err != nil {
				t.Fatal(err)
			}
			s := startServer(t, serverOptions{model: tc.model, serviceRange: "10.96.0.0/16", etcd: etcd})
			c := s.client

			// Upstream's objects listed in protobuf (served from etcd's
			// bytes where they read as stored, internal/rawlist) read as
			// in JSON, v1beta1 IPAddresses included.
			pb := clientAccepting(t, s.restConfig, "application/vnd.kubernetes.protobuf,application/json")
			js := clientAccepting(t, s.restConfig, "application/json")
			head, err := js.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			at := metav1.ListOptions{ResourceVersion: head.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
			compareServicePages(ctx, t, pb, js, "", at, 0)
			if tc.model == string(model.IPAddress) {
				compareIPAddressPages(ctx, t, pb, js, at, 0)
			}

			taken := map[string]bool{}
			for key, want := range f.Expect.Services {
				ns, name, _ := strings.Cut(key, "/")
				svc, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("upstream Service %s: %v", key, err)
				}
				if !slices.Equal(svc.Spec.ClusterIPs, want) {
					t.Errorf("%s: clusterIPs %v, want %v", key, svc.Spec.ClusterIPs, want)
				}
				for _, ip := range want {
					if ip != corev1.ClusterIPNone {
						taken[ip] = true
					}
				}
			}
			for _, ns := range f.Expect.Namespaces {
				if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
					t.Errorf("upstream namespace %s: %v", ns, err)
				}
			}
			for ip := range taken {
				if !strings.HasPrefix(ip, "10.96.") {
					continue // in the extra ServiceCIDR, checked below
				}
				_, err := create(ctx, c, newService("probe", withIP(ip)))
				expectStatus(t, err, 422, "provided IP is already allocated")
			}
			for i := 0; i < 40; i++ {
				svc := mustCreate(t, ctx, c, newService(fmt.Sprintf("new-%02d", i)))
				if taken[svc.Spec.ClusterIP] {
					t.Fatalf("%s handed out again (upstream allocated it)", svc.Spec.ClusterIP)
				}
				taken[svc.Spec.ClusterIP] = true
			}

			switch tc.model {
			case string(model.Bitmap):
				// The RangeAllocation kube-apiserver wrote is still the truth
				// and now also holds the new Services.
				resp, err := etcd.Client().Get(ctx, "/registry/ranges/serviceips")
				if err != nil || len(resp.Kvs) != 1 {
					t.Fatalf("bitmap key: %v %v", resp, err)
				}
				ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
				if err != nil || ra.Range != "10.96.0.0/16" {
					t.Fatalf("decode RangeAllocation: %v %v", ra, err)
				}
			case string(model.IPAddress):
				for ip, want := range f.Expect.IPAddresses {
					obj, err := c.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
					if err != nil {
						t.Fatalf("upstream IPAddress %s: %v", ip, err)
					}
					ref := obj.Spec.ParentRef
					if got := strings.Join([]string{ref.Group, ref.Resource, ref.Namespace, ref.Name}, "/"); got != want.ParentRef {
						t.Errorf("IPAddress %s parentRef %s, want %s", ip, got, want.ParentRef)
					}
				}
				// The extra ServiceCIDR upstream created serves allocations.
				_, err := c.CoreV1().Services("fx").Create(ctx, newService("probe", withIP("10.100.0.5")), metav1.CreateOptions{})
				expectStatus(t, err, 422, "provided IP is already allocated")
				if _, err := c.CoreV1().Services("fx").Create(ctx, newService("in-extra-2", withIP("10.100.0.6")), metav1.CreateOptions{}); err != nil {
					t.Fatalf("static IP in the extra ServiceCIDR: %v", err)
				}
				waitReadyCIDR(t, c, "extra")
				waitReadyCIDR(t, c, "kubernetes")
				stillServed(t, ctx, c, etcd, f)
			}
		})
	}
}

// stillServed updates and deletes objects kube-apiserver wrote (a label on
// an upstream IPAddress, the deletion of an upstream Service) and checks
// each is read back whole, and that the deleted Service's address is freed
// (in the bitmap too when the fixture has one: dual write is then on).
func stillServed(t *testing.T, ctx context.Context, c kubernetes.Interface, etcd *etcdtest.Etcd, f *fixtures.File) {
	t.Helper()
	ip := f.Expect.Services["fx/static-low"][0]
	patch := []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	got, err := c.NetworkingV1().IPAddresses().Patch(ctx, ip, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("label upstream IPAddress %s: %v", ip, err)
	}
	if got.Labels["touched"] != "yes" || got.Spec.ParentRef == nil || got.Spec.ParentRef.Name != "static-low" ||
		got.Labels["ipaddress.kubernetes.io/managed-by"] != f.Expect.IPAddresses[ip].Labels["ipaddress.kubernetes.io/managed-by"] {
		t.Errorf("IPAddress %s after a label patch: %+v", ip, got)
	}
	// Written back as v1, the storage version of this server.
	resp, err := etcd.Client().Get(ctx, f.EtcdPrefix+"/ipaddresses/"+ip)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read IPAddress %s from etcd: %v", ip, err)
	}
	if obj, err := etcdlayout.Decode(resp.Kvs[0].Value); err != nil || obj.GetObjectKind().GroupVersionKind() != etcdlayout.KindIPAddress {
		t.Errorf("IPAddress %s stored as %v (err %v), want networking.k8s.io/v1", ip, obj.GetObjectKind().GroupVersionKind(), err)
	}

	freed := f.Expect.Services["fx/dyn-01"][0]
	if err := c.CoreV1().Services("fx").Delete(ctx, "dyn-01", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete upstream Service fx/dyn-01: %v", err)
	}
	if _, err := c.NetworkingV1().IPAddresses().Get(ctx, freed, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("IPAddress %s of the deleted fx/dyn-01: %v, want NotFound", freed, err)
	}
	if len(f.Expect.Bitmaps) > 0 {
		resp, err := etcd.Client().Get(ctx, f.EtcdPrefix+"/ranges/serviceips")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("bitmap key: %v", err)
		}
		ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if bitSet(t, ra, freed) {
			t.Errorf("bit of %s still set after fx/dyn-01 was deleted (dual write)", freed)
		}
		if !bitSet(t, ra, f.Expect.Services["fx/dyn-02"][0]) {
			t.Errorf("bit of fx/dyn-02's %s lost", f.Expect.Services["fx/dyn-02"][0])
		}
	}
	mustCreate(t, ctx, c, newService("reuse", withIP(freed)))

	// v1beta1 is decoded, never served.
	if _, err := c.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1beta1"); !apierrors.IsNotFound(err) {
		t.Errorf("discovery of networking.k8s.io/v1beta1: %v, want NotFound", err)
	}
}

// bitSet reports whether ra's bit for ip is set (bit i is network+1+i).
func bitSet(t *testing.T, ra *corev1.RangeAllocation, ip string) bool {
	t.Helper()
	p := netip.MustParsePrefix(ra.Range)
	a := netip.MustParseAddr(ip)
	n, v := p.Masked().Addr().As4(), a.As4()
	return bitSetIndex(ra, int(binary.BigEndian.Uint32(v[:])-binary.BigEndian.Uint32(n[:])-1))
}

// TestIPAddressWrittenAsUpstream: the IPAddress our allocator writes for a
// Service (in process, no loopback request) is stored as kube-apiserver 1.36
// stores its own: same labels, parentRef and field ownership (manager,
// operation, API version, field set), read from etcd.
func TestIPAddressWrittenAsUpstream(t *testing.T) {
	t.Parallel()
	f := fixtures.Load(t, fixtures.IPAddress136)
	raw, ok := f.Value("/registry/ipaddresses/10.96.123.34")
	if !ok {
		t.Fatal("fixture lacks the IPAddress 10.96.123.34")
	}
	upstream, err := etcdlayout.DecodeIPAddress(raw)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/16"})
	ctx := testContext(t)
	svc := newService("dyn-01")
	svc.Namespace = "default"
	created := mustCreate(t, ctx, s.client, svc)
	resp, err := s.etcd.Client().Get(ctx, etcdlayout.Layout{}.IPAddress(created.Spec.ClusterIP))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("IPAddress of %s not in etcd: %v", created.Spec.ClusterIP, err)
	}
	ours, err := etcdlayout.DecodeIPAddress(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(upstream.Labels, ours.Labels); diff != "" {
		t.Errorf("labels (-upstream +ours):\n%s", diff)
	}
	wantRef := upstream.Spec.ParentRef.DeepCopy()
	wantRef.Namespace, wantRef.Name = "default", "dyn-01"
	if diff := cmp.Diff(wantRef, ours.Spec.ParentRef); diff != "" {
		t.Errorf("parentRef (-upstream +ours):\n%s", diff)
	}
	ignoreTime := cmpopts.IgnoreFields(metav1.ManagedFieldsEntry{}, "Time")
	if diff := cmp.Diff(upstream.ManagedFields, ours.ManagedFields, ignoreTime); diff != "" {
		t.Errorf("managedFields (-upstream +ours):\n%s", diff)
	}
	if len(ours.ManagedFields) == 1 && ours.ManagedFields[0].Time == nil {
		t.Error("managedFields entry has no time")
	}
}
