package iprepair

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// pagedLists is a fake API whose IPAddresses come in two pages and whose
// Services in one, recording the order of the list requests; failOn names
// a request ("ipaddresses/2", "services") answered with an error.
type pagedLists struct {
	mu     sync.Mutex
	order  []string
	failOn string
}

var errListed = errors.New("listed with an error")

func (l *pagedLists) client() *fake.Clientset {
	fc := fake.NewClientset()
	ip := func(name string) networkingv1.IPAddress {
		return networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	fc.PrependReactor("list", "ipaddresses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		page := "ipaddresses/1"
		if a.(k8stesting.ListActionImpl).GetListOptions().Continue != "" {
			page = "ipaddresses/2"
		}
		if err := l.note(page); err != nil {
			return true, nil, err
		}
		if page == "ipaddresses/1" {
			return true, &networkingv1.IPAddressList{ListMeta: metav1.ListMeta{Continue: "next"}, Items: []networkingv1.IPAddress{ip("10.0.0.1")}}, nil
		}
		return true, &networkingv1.IPAddressList{Items: []networkingv1.IPAddress{ip("10.0.0.2")}}, nil
	})
	fc.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := l.note("services"); err != nil {
			return true, nil, err
		}
		svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"}}}
		return true, &corev1.ServiceList{Items: []corev1.Service{svc}}, nil
	})
	return fc
}

func (l *pagedLists) note(request string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, request)
	if request == l.failOn {
		return errListed
	}
	return nil
}

// TestListViewOrder: the IPAddresses' first page is read before the
// Services' list starts (the revision order the repair's judgement relies
// on), and the view holds both lists whole.
func TestListViewOrder(t *testing.T) {
	l := &pagedLists{}
	v, err := newListView(context.Background(), l.client())
	if err != nil {
		t.Fatal(err)
	}
	first := func(request string) int {
		for i, r := range l.order {
			if r == request {
				return i
			}
		}
		t.Fatalf("no %s request in %v", request, l.order)
		return -1
	}
	if first("ipaddresses/1") > first("services") {
		t.Errorf("the Services were listed before the IPAddresses' first page: %v", l.order)
	}
	first("ipaddresses/2")
	if len(v.ips) != 2 || len(v.services) != 1 {
		t.Errorf("view holds %d IPAddresses and %d Services, want 2 and 1", len(v.ips), len(v.services))
	}
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.2"}, mustKeys(t, v)); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

// TestListViewErrors: a failed list of either kind, running at once with
// the other, fails the view with its error and leaves nothing running.
func TestListViewErrors(t *testing.T) {
	for _, failOn := range []string{"ipaddresses/1", "ipaddresses/2", "services"} {
		l := &pagedLists{failOn: failOn}
		if _, err := newListView(context.Background(), l.client()); !errors.Is(err, errListed) {
			t.Errorf("%s failing: err %v, want %v", failOn, err, errListed)
		}
	}
}

func mustKeys(t *testing.T, v *listView) []string {
	t.Helper()
	keys, err := v.keys()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
