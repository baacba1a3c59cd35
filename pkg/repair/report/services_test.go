package report

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCompareJoined(t *testing.T) {
	t.Parallel()
	cases := [][4]string{
		{"a", "b", "a", "b"},
		{"a", "b", "a-x", "b"}, // '-' sorts before '/'
		{"a", "b", "a0", "b"},  // '0' sorts after '/'
		{"default", "web", "default", "web-1"},
		{"", "", "", "x"},
		{"ns", "", "ns", ""},
		{"a/b", "c", "a", "b/c"}, // the same joined text
		{"kube-system", "dns", "kube", "system"},
	}
	for _, c := range cases {
		want := strings.Compare(c[0]+"/"+c[1], c[2]+"/"+c[3])
		if got := compareJoined(c[0], c[1], c[2], c[3]); got != want {
			t.Errorf("compareJoined(%q, %q, %q, %q) = %d, want %d", c[0], c[1], c[2], c[3], got, want)
		}
		if got := compareJoined(c[2], c[3], c[0], c[1]); got != -want {
			t.Errorf("compareJoined(%q, %q, %q, %q) = %d, want %d", c[2], c[3], c[0], c[1], got, -want)
		}
	}
}

func FuzzCompareJoined(f *testing.F) {
	f.Add("a", "b", "a-x", "b")
	f.Add("default", "web", "default", "web-1")
	f.Fuzz(func(t *testing.T, ns1, name1, ns2, name2 string) {
		want := strings.Compare(ns1+"/"+name1, ns2+"/"+name2)
		if got := compareJoined(ns1, name1, ns2, name2); got != want {
			t.Fatalf("compareJoined(%q, %q, %q, %q) = %d, want %d", ns1, name1, ns2, name2, got, want)
		}
	})
}

func TestNextPageSize(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	for _, tt := range []struct {
		remaining *int64
		want      int64
	}{
		{nil, ListPageSize},
		{n(0), ListPageSize},
		{n(50_000), ListPageSize},
		{n(200_000), 10_000},
		{n(995_000), 49_750},
		{n(10_000_000), MaxListPageSize},
	} {
		if got := NextPageSize(tt.remaining); got != tt.want {
			t.Errorf("NextPageSize(%v) = %d, want %d", tt.remaining, got, tt.want)
		}
	}
}

// TestListServicesPages: the first page asks for ListPageSize, the pages
// after it for NextPageSize of what the first said remains, and the
// Services of every page come back oldest first.
func TestListServicesPages(t *testing.T) {
	t.Parallel()
	const total = 240_000
	client := fake.NewClientset()
	var limits []int64
	client.PrependReactor("list", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		opts := action.(k8stesting.ListActionImpl).ListOptions
		limits = append(limits, opts.Limit)
		from := 0
		if opts.Continue != "" {
			from, _ = strconv.Atoi(opts.Continue)
		}
		to := min(from+int(opts.Limit), total)
		list := &corev1.ServiceList{}
		for i := from; i < to; i++ {
			list.Items = append(list.Items, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s-%06d", total-1-i),
				CreationTimestamp: metav1.NewTime(time.Unix(int64(total-i), 0))}})
		}
		if to < total {
			list.Continue = strconv.Itoa(to)
			remaining := int64(total - to)
			list.RemainingItemCount = &remaining
		}
		return true, list, nil
	})
	services, err := ListServices(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != total {
		t.Fatalf("%d Services, want %d", len(services), total)
	}
	if services[0].Name != "s-000000" || services[total-1].Name != fmt.Sprintf("s-%06d", total-1) {
		t.Errorf("not oldest first: %s … %s", services[0].Name, services[total-1].Name)
	}
	want := []int64{ListPageSize}
	for range (total - ListPageSize + 11_749) / 11_750 {
		want = append(want, 11_750) // (240,000 - 5,000) / 20
	}
	if !slices.Equal(limits, want) {
		t.Errorf("page limits %v, want %v", limits, want)
	}
}

// TestListServicesSlim: the listed Services are the slim copies the repairs
// read (internal/slim), not the pages' items: what no repair reads is gone,
// the addresses, ports and identity stay.
func TestListServicesSlim(t *testing.T) {
	t.Parallel()
	now := metav1.NewTime(time.Unix(1000, 0))
	full := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a", ResourceVersion: "7", CreationTimestamp: now,
			Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"note": "dropped"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1", "fd00::1"},
			Selector: map[string]string{"app": "a"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: 30080}}},
	}
	client := fake.NewClientset()
	client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.ServiceList{Items: []corev1.Service{*full.DeepCopy()}}, nil
	})
	services, err := ListServices(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 1 {
		t.Fatalf("%d Services, want 1", len(services))
	}
	got := services[0]
	if got.ManagedFields != nil || got.Annotations != nil || got.Spec.Selector != nil {
		t.Errorf("kept what no repair reads: managedFields %v, annotations %v, selector %v", got.ManagedFields, got.Annotations, got.Spec.Selector)
	}
	if got.UID != "uid-a" || got.ResourceVersion != "7" || !got.CreationTimestamp.Equal(&now) || got.Labels["app"] != "a" ||
		!slices.Equal(got.Spec.ClusterIPs, full.Spec.ClusterIPs) || len(got.Spec.Ports) != 1 || got.Spec.Ports[0].NodePort != 30080 {
		t.Errorf("lost what the repairs read: %+v", got)
	}
}
