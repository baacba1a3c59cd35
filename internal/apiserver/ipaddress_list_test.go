package apiserver

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/registry/ipaddresses"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// newIPAddressStore returns a fresh etcd and the IPAddress store on it
// under the etcd prefix (--etcd-prefix), called in process
// (ipaddresses.InProcess), as the server builds it.
func newIPAddressStore(t *testing.T, prefix string) (*etcdtest.Etcd, ipaddresses.InProcess) {
	t.Helper()
	etcd := etcdtest.New(t)
	r, err := ipaddresses.NewREST(Scheme, newRESTOptionsGetter(etcd.Endpoints(), prefix, EtcdTLS{}, etcd, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Destroy)
	return etcd, r.InProcess(nil)
}

// TestIPAddressInProcessList: the IPAddress store's in-process List (the
// ServiceCIDR controller's live confirmation) answers as the API's LIST:
// every IPAddress, or those the label selector picks, and one created a
// moment before is in it (a consistent read, though the watch cache
// serves it).
func TestIPAddressInProcessList(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, store := newIPAddressStore(t, "/registry")
	owner := allocation.Owner{Namespace: "default", Name: "web"}
	names := func(opts metav1.ListOptions) []string {
		t.Helper()
		// Until the watch cache has loaded, a list may be refused (429
		// "storage is (re)initializing"), as a LIST request is.
		var list *networkingv1.IPAddressList
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			list, err = store.List(ctx, opts)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("List(%+v): %v", opts, err)
		}
		var out []string
		for _, item := range list.Items {
			out = append(out, item.Name)
		}
		slices.Sort(out)
		return out
	}
	var all, v4 []string
	for i, text := range []string{"10.96.0.10", "fd00::10", "10.96.0.11", "fd00::11", "10.96.0.12"} {
		ip := netip.MustParseAddr(text)
		if _, err := store.Create(ctx, ipaddress.NewObject(ip, owner), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		all = append(all, text)
		if ip.Is4() {
			v4 = append(v4, text)
		}
		slices.Sort(all)
		slices.Sort(v4)
		// Right after each create: the list must already hold it.
		if diff := cmp.Diff(all, names(metav1.ListOptions{})); diff != "" {
			t.Fatalf("after create %d, every IPAddress (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(v4, names(metav1.ListOptions{LabelSelector: ipaddress.LabelIPFamily + "=IPv4"})); diff != "" {
			t.Fatalf("after create %d, the IPv4 ones (-want +got):\n%s", i, diff)
		}
	}
	if _, err := store.List(ctx, metav1.ListOptions{LabelSelector: "=bad"}); err == nil || !strings.Contains(err.Error(), "list ipaddresses") {
		t.Errorf("a malformed label selector: %v, want the selector refused", err)
	}
}
