package iprepair_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestCompareModelsSettled: of the disagreements one comparison finds, only
// those the second, settle later, finds again are reported. Bits .5 and .6
// have no IPAddress at the first comparison; by the second, .5's IPAddress
// exists (an allocation in flight that the servers' repair carried over) and
// .7 has a bit and no IPAddress (a new allocation in flight): only .6 is
// reported. Nothing found first means no second comparison.
func TestCompareModelsSettled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	rng, err := subrange.New(netip.MustParsePrefix("10.0.0.0/24"), model.Bitmap)
	if err != nil {
		t.Fatal(err)
	}
	store, err := clusterip.NewEtcdAllocator(etcd.Client(), "/registry/ranges/serviceips", rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	allocate := func(ip string) {
		t.Helper()
		if err := store.Allocate(ctx, netip.MustParseAddr(ip), allocation.Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	allocate("10.0.0.5")
	allocate("10.0.0.6")

	// Each List of IPAddresses starts a comparison; the first one's answer
	// lacks .5, the second has it, and .7 is allocated just before the
	// second reads the map.
	client := fake.NewClientset()
	lists := 0
	client.PrependReactor("list", "ipaddresses", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		list := &networkingv1.IPAddressList{}
		if lists > 1 {
			list.Items = append(list.Items, networkingv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.5"},
				Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}},
			})
		}
		if lists == 2 {
			allocate("10.0.0.7") // the maps are read after the List
		}
		return true, list, nil
	})

	stores := []iprepair.BitmapStore{store}
	problems, err := iprepair.CompareModelsSettled(ctx, client, stores, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Type+" "+p.IP)
	}
	if diff := cmp.Diff([]string{iprepair.TypeDisagreement + " 10.0.0.6"}, got); diff != "" {
		t.Errorf("CompareModelsSettled (-want +got):\n%s", diff)
	}
	if lists != 2 {
		t.Errorf("%d comparisons, want 2", lists)
	}

	// Every bit with its IPAddress: one comparison, nothing reported.
	for _, ip := range []string{"10.0.0.6", "10.0.0.7"} {
		if err := store.Release(ctx, netip.MustParseAddr(ip), allocation.Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	lists = 2 // the .5 IPAddress is listed from now on, and nothing allocated
	problems, err = iprepair.CompareModelsSettled(ctx, client, stores, time.Hour)
	if err != nil || len(problems) != 0 {
		t.Errorf("CompareModelsSettled with the models agreeing = %v, %v; want none at once", problems, err)
	}
	if lists != 3 {
		t.Errorf("%d comparisons when the first found nothing, want 1", lists-2)
	}
}
