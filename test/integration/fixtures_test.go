package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/pkg/apiserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestServesUpstreamData starts the server on etcd data written by a real
// kube-apiserver and checks it serves those objects and never hands out an
// address that upstream allocated.
func TestServesUpstreamData(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		model   string
	}{
		{fixtures.Bitmap132, apiserver.ModelBitmap},
		{fixtures.IPAddress136, apiserver.ModelIPAddress},
	} {
		t.Run(tc.model, func(t *testing.T) {
			f := fixtures.Load(t, tc.fixture)
			etcd := etcdtest.New(t)
			ctx := testContext(t)
			if _, err := fixtures.Put(ctx, etcd.Client(), f); err != nil {
				t.Fatal(err)
			}
			s := startServer(t, serverOptions{model: tc.model, serviceRange: "10.96.0.0/16", etcd: etcd})
			c := s.client

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
			case apiserver.ModelBitmap:
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
			case apiserver.ModelIPAddress:
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
			}
		})
	}
}
