package apiserver

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/storage"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestContinuedPages: a paged list through the Services' etcd store (the
// registry's path to the embedded etcd's in-process client, whose pages
// after the first are read without etcd's count) returns every Service
// stored at the list's revision once, in order, and on each page the
// remainingItemCount etcd's count would give, while Services are created
// between the pages (after the list's revision: in no page, in no count).
func TestContinuedPages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	put := func(i int) { t.Helper(); putStoredService(ctx, t, etcd, scaleService(i)) }
	const stored, limit = 230, 40
	for i := range stored {
		put(i)
	}
	store, prefix := servicesStore(t, getter)

	var seen []string
	var token string
	for page := 0; ; page++ {
		p := storage.Everything
		p.Limit, p.Continue = limit, token
		list := &corev1.ServiceList{}
		if err := store.GetList(ctx, prefix, storage.ListOptions{Recursive: true, Predicate: p}, list); err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, svc := range list.Items {
			seen = append(seen, svc.Name)
		}
		token = list.Continue
		if token == "" {
			if list.RemainingItemCount != nil {
				t.Errorf("the last page says %d remain", *list.RemainingItemCount)
			}
			break
		}
		if r := list.RemainingItemCount; r == nil || *r != int64(stored-len(seen)) {
			t.Errorf("page %d, %d seen: remainingItemCount %v, want %d", page, len(seen), r, stored-len(seen))
		}
		if page > stored/limit {
			t.Fatalf("%d pages and more still", page+1)
		}
		put(10_000 + page) // after the list's revision
	}
	if len(seen) != stored {
		t.Fatalf("paged %d Services, want the %d stored at the list's revision", len(seen), stored)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i-1] >= seen[i] {
			t.Fatalf("pages out of order or repeated: %s then %s", seen[i-1], seen[i])
		}
	}
}
