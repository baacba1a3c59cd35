package report

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestPagesAnswers: a page is asked for as protobuf (or JSON) through the
// client's REST client, with the page's limit and continue token; a
// protobuf page is walked and a JSON page (a server that has no protobuf)
// decoded in full, each made slim, with the list's metadata; a page whose
// answer is cut short is an error, never fewer objects.
func TestPagesAnswers(t *testing.T) {
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
	asJSON, err := json.Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	asProtobuf, err := etcdlayout.Encode(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		cut               bool
	}{
		{"protobuf", "application/vnd.kubernetes.protobuf", asProtobuf, false},
		{"JSON", "application/json", asJSON, false},
		{"protobuf cut short", "application/vnd.kubernetes.protobuf", asProtobuf, true},
	} {
		var mu sync.Mutex
		var asked, accepted []string
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/services" {
				http.NotFound(w, r)
				return
			}
			mu.Lock()
			asked, accepted = append(asked, r.URL.RawQuery), append(accepted, r.Header.Get("Accept"))
			mu.Unlock()
			w.Header().Set("Content-Type", tc.contentType)
			w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
			if !tc.cut {
				_, _ = w.Write(tc.body)
				return
			}
			// Half the promised bytes, then the connection closes.
			_, _ = w.Write(tc.body[:len(tc.body)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
		if err != nil {
			t.Fatal(err)
		}
		items, meta, err := ServicePages(client).Page(ctx, metav1.ListOptions{Limit: 2, Continue: "this-page"})
		api.Close()
		mu.Lock()
		if len(asked) != 1 || asked[0] != "continue=this-page&limit=2" || accepted[0] != protobufOrJSON {
			t.Errorf("%s: the server was asked %q accepting %q, want one page with limit=2 and the continue token, accepting %q",
				tc.name, asked, accepted, protobufOrJSON)
		}
		mu.Unlock()
		if tc.cut {
			if err == nil {
				t.Errorf("%s: %d items and no error, want an error", tc.name, len(items))
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff([]*corev1.Service{slim.Service(&page.Items[0])}, items); diff != "" {
			t.Errorf("%s: items (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(page.ListMeta, meta); diff != "" {
			t.Errorf("%s: metadata (-want +got):\n%s", tc.name, diff)
		}
	}
}
