package report

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/slim"
)

// TestPagesJSON: a page a server sends as JSON (one that has no protobuf)
// is decoded in full and made slim, with the list's metadata; the request
// carries the page's limit and continue token.
func TestPagesJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remaining := int64(3)
	page := &corev1.ServiceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "77", Continue: "next-page", RemainingItemCount: &remaining},
		Items: []corev1.Service{{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "70",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}, Annotations: map[string]string{"a": "b"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.7", ClusterIPs: []string{"10.0.0.7"}},
		}},
	}
	var mu sync.Mutex
	var asked []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/services" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		asked = append(asked, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	defer api.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	items, meta, err := ServicePages(client).Page(ctx, metav1.ListOptions{Limit: 2, Continue: "this-page"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*corev1.Service{slim.Service(&page.Items[0])}, items); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(page.ListMeta, meta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != "continue=this-page&limit=2" {
		t.Errorf("the server was asked %q, want one page with limit=2 and the continue token", asked)
	}
}
