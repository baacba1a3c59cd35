package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestPresizedLists: the Services' etcd store, on a real etcd, gives an
// unfiltered page room for its limit and no more than the collection
// holds, and a list of the whole collection room for the count and a
// little more; it leaves a namespace's whole list and a filtered page to
// grow as the store grows them; every list holds what is stored,
// including objects created after the count it took its room from; and a
// read of the store's Stats renews the count.
func TestPresizedLists(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	put := func(ns string, i int) {
		t.Helper()
		svc := scaleService(i)
		svc.Namespace = ns
		putStoredService(ctx, t, etcd, svc)
	}
	for i := range 250 {
		put("scale", i)
	}
	for i := range 50 {
		put("other", 1000+i)
	}
	store, prefix := servicesStore(t, getter)
	presized, ok := store.(*presizedLists)
	if !ok {
		t.Fatalf("the Services' store is a %T, not presized", store)
	}
	whole, other := prefix, prefix+"/other"
	page := func(limit int64) storage.ListOptions {
		p := storage.Everything
		p.Limit = limit
		return storage.ListOptions{Recursive: true, Predicate: p}
	}
	filtered := page(100)
	filtered.Predicate.Label = labels.SelectorFromSet(labels.Set{"app": "x"})
	filtered.Predicate.Field = fields.Everything()
	filtered.Predicate.GetAttrs = storage.DefaultNamespaceScopedAttr

	for _, tc := range []struct {
		name     string
		key      string
		opts     storage.ListOptions
		wantLen  int
		wantRoom int // 0: left to the store
	}{
		{"a page", whole, page(100), 100, 100},
		{"a page larger than the collection", whole, page(1000), 300, 300},
		{"the whole collection", whole, page(0), 300, 300 + 300/64 + 16},
		{"a namespace's whole list", other, page(0), 50, 0},
		{"a namespace's page", other, page(20), 20, 20},
		{"a filtered page", whole, filtered, 0, 0},
		{"one object", whole + "/scale/s-000001", storage.ListOptions{Predicate: storage.Everything}, 1, 0},
	} {
		if got := presized.room(ctx, tc.key, tc.opts); got != tc.wantRoom {
			t.Errorf("%s: room for %d items, want %d", tc.name, got, tc.wantRoom)
		}
		list := &corev1.ServiceList{}
		if err := store.GetList(ctx, tc.key, tc.opts, list); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(list.Items) != tc.wantLen {
			t.Errorf("%s: %d items, want %d", tc.name, len(list.Items), tc.wantLen)
		}
		if tc.wantRoom > 0 && cap(list.Items) != tc.wantRoom {
			t.Errorf("%s: %d items in room for %d, want room for %d made ahead (the store's own growth leaves other room)",
				tc.name, len(list.Items), cap(list.Items), tc.wantRoom)
		}
	}

	// Created after the count: the room is short, the list complete.
	for i := range 40 {
		put("scale", 2000+i)
	}
	list := &corev1.ServiceList{}
	if err := store.GetList(ctx, whole, page(0), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 340 {
		t.Errorf("the whole collection after 40 creates: %d items, want 340", len(list.Items))
	}
	seen := map[string]bool{}
	for _, s := range list.Items {
		seen[s.Namespace+"/"+s.Name] = true
	}
	if len(seen) != 340 || !seen["scale/s-002039"] || !seen["other/s-001049"] {
		t.Errorf("the whole collection holds %d distinct Services, the last created %v", len(seen), seen["scale/s-002039"])
	}
	// The registry's periodic read of the count (its object count metric)
	// is the count the store keeps.
	if _, err := store.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := presized.room(ctx, whole, page(0)), 340+340/64+16; got != want {
		t.Errorf("after the registry read the count: room for %d, want %d", got, want)
	}
}

// BenchmarkGetListPage reads one page of 20,000 stored Services from a real
// etcd through the Services' store: its bytes allocated per page fall by
// the slice's growth when the page is given room ahead.
func BenchmarkGetListPage(b *testing.B) {
	ctx := context.Background()
	etcd := etcdtest.New(b)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	const n = 20000
	for i := range n {
		putScaleService(b, ctx, etcd.Client(), i, scaleService(i))
	}
	store, prefix := servicesStore(b, getter)
	for _, bc := range []struct {
		name  string
		store storage.Interface
	}{{"room made", store}, {"grown by the store", store.(*presizedLists).Interface}} {
		b.Run(bc.name, func(b *testing.B) {
			p := storage.Everything
			p.Limit = n
			b.ReportAllocs()
			for b.Loop() {
				list := &corev1.ServiceList{}
				if err := bc.store.GetList(ctx, prefix, storage.ListOptions{Recursive: true, Predicate: p}, list); err != nil {
					b.Fatal(err)
				}
				if len(list.Items) != n {
					b.Fatalf("%d items, want %d", len(list.Items), n)
				}
			}
		})
	}
}

// servicesStore is the Services' etcd store as getter builds it for the
// registry, and its key prefix; it is destroyed when tb ends.
// putStoredService writes svc to etcd under the Services' prefix of
// /registry, encoded as the storage codec encodes it.
func putStoredService(ctx context.Context, t *testing.T, etcd *etcdtest.Etcd, svc *corev1.Service) {
	t.Helper()
	data, err := runtime.Encode(storageCodec(""), svc)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("/registry/%s/%s/%s", etcdlayout.ServicesPath, svc.Namespace, svc.Name)
	if _, err := etcd.Client().Put(ctx, key, string(data)); err != nil {
		t.Fatal(err)
	}
}

func servicesStore(tb testing.TB, getter *restOptionsGetter) (storage.Interface, string) {
	tb.Helper()
	opts, err := getter.GetRESTOptions(corev1.Resource("services"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	store, destroy, err := getter.stores.rawStorage(opts.StorageConfig,
		func() runtime.Object { return &corev1.Service{} }, func() runtime.Object { return &corev1.ServiceList{} }, opts.ResourcePrefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(destroy)
	return store, opts.ResourcePrefix
}
