package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/streaminformer"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
)

// cuttable is a watch source whose current watch the test can end, as a
// cut connection ends it; the next watch waits until the test resumes.
type cuttable struct {
	inner streaminformer.Watcher

	mu      sync.Mutex
	current watch.Interface
	gate    chan struct{} // non-nil while cut
	opts    []metav1.ListOptions
}

func (c *cuttable) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w, err := c.inner.WatchWithContext(ctx, opts)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current, c.opts = w, append(c.opts, opts)
	return w, err
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = make(chan struct{})
	c.current.Stop()
}

func (c *cuttable) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.gate)
	c.gate = nil
}

func (c *cuttable) watches() []metav1.ListOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]metav1.ListOptions(nil), c.opts...)
}

// tombstones counts a handler's deletes of objects the informer missed.
type tombstones struct {
	cache.ResourceEventHandlerFuncs
	mu   sync.Mutex
	keys []string
}

func (h *tombstones) OnDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.keys = append(h.keys, tomb.Key)
	}
}

func (h *tombstones) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.keys...)
}

// serviceSource is the server's Service informer source (the slim codec)
// over getter's etcd, destroyed when the test ends.
func serviceSource(t *testing.T, getter *restOptionsGetter) storageSource {
	t.Helper()
	src, destroy, err := getter.informerSource(corev1.Resource("services"), slimServiceCodec,
		func() runtime.Object { return &corev1.Service{} }, func() runtime.Object { return &corev1.ServiceList{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)
	return src
}

// runSynced runs informer until ctx ends and waits until it has synced.
func runSynced(t *testing.T, ctx context.Context, informer *streaminformer.Informer) {
	t.Helper()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer never synced")
	}
}

// TestStreamingInformerAfterCompaction: the streaming informer on a
// Service informer source (a real etcd) whose watch is cut while Services
// change and etcd compacts past its revision. Resumed, its watch from the
// old revision is answered 410 by the store, and it lists again: the
// cache then holds what etcd holds, and a Service deleted while the
// watch was cut reaches the handlers as a tombstone.
func TestStreamingInformerAfterCompaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	client := etcd.Client()
	put := func(svc *corev1.Service, i int) int64 { return putScaleService(t, ctx, client, i, svc) }
	for i := 1; i <= 3; i++ {
		put(scaleService(i), i)
	}
	ss := newStoreSource()
	ss.set(serviceSource(t, getter))
	source := &cuttable{inner: storeListWatch{src: ss}}
	informer := streaminformer.New(source, "Service", cache.Indexers{})
	if err := informer.SetTransform(informerTransform); err != nil {
		t.Fatal(err)
	}
	deletes := &tombstones{}
	if _, err := informer.AddEventHandler(deletes); err != nil {
		t.Fatal(err)
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	runSynced(t, ictx, informer)

	source.cut()
	updated := scaleService(3)
	updated.Spec.Type = corev1.ServiceTypeNodePort
	updated.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	updated.Spec.Ports[0].NodePort = 30003
	put(updated, 3)
	put(scaleService(4), 4)
	del, err := client.Delete(ctx, scaleServiceKey(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	source.resume()

	want := map[string]runtime.Object{"scale/s-000001": scaleService(1), "scale/s-000003": updated, "scale/s-000004": scaleService(4)}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return len(informer.GetStore().ListKeys()) == len(want) && cachedEqual(informer.GetStore(), want) == "", nil
	})
	if err != nil {
		t.Fatalf("after the compaction the informer holds %v (-want +got):\n%s", informer.GetStore().ListKeys(), cachedEqual(informer.GetStore(), want))
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(deletes.seen()) == 1, nil
	})
	if got := deletes.seen(); err != nil || len(got) != 1 || got[0] != "scale/s-000002" {
		t.Errorf("tombstones handed out: %q, want the deleted Service's alone", got)
	}
	// The watches: the first list, the resume from the compacted
	// revision, then a list again.
	opts := source.watches()
	if len(opts) < 3 || opts[1].ResourceVersion == "" || opts[1].SendInitialEvents != nil ||
		opts[len(opts)-1].SendInitialEvents == nil || !*opts[len(opts)-1].SendInitialEvents {
		t.Errorf("watches %+v: want a list, a resume from a revision, and a list again", opts)
	}
}

// TestStreamingInformerServicesAfterCompaction: the map-based repairs read
// the Services from the streaming informer (repair.InformerServices, which
// watches etcd from the store's version to see that the store is whole)
// after etcd has compacted up to the revision the informer listed at. The
// store's version is the list's, though the list's last object (in key
// order) was written first: the Services come from the informer, not from
// the fallback list of every Service.
func TestStreamingInformerServicesAfterCompaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	client := etcd.Client()
	layout := etcdlayout.Layout{Prefix: "/registry"}
	for i := 3; i >= 1; i-- { // the last key listed is the oldest write
		putScaleService(t, ctx, client, i, scaleService(i))
	}
	for i := range 5 { // writes of other keys: the list's revision is past every Service's
		if _, err := client.Put(ctx, fmt.Sprintf("/registry/other/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	ss := newStoreSource()
	ss.set(serviceSource(t, getter))
	informer := streaminformer.New(storeListWatch{src: ss}, "Service", cache.Indexers{})
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	runSynced(t, ictx, informer)
	listed, err := strconv.ParseInt(informer.LastSyncResourceVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Compact(ctx, listed, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	services := repair.InformerServices{Informer: informer, Etcd: client, Prefix: layout.ServicesPrefix(),
		List: func(context.Context) ([]*corev1.Service, error) {
			return nil, fmt.Errorf("the Services were listed: the store's version %q is older than the list's %d",
				informer.GetStore().LastStoreSyncResourceVersion(), listed)
		}}
	got, err := services.Services(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("Services from the informer: %d, %v; want the 3", len(got), err)
	}
}

// scaleServiceKey is the etcd key of Service i of test/scale.
func scaleServiceKey(i int) string {
	return fmt.Sprintf("/registry/%s/scale/s-%06d", etcdlayout.ServicesPath, i)
}

// putScaleService stores svc in etcd at the key of Service i of test/scale
// (scaleService), encoded as the Services' store encodes it, and returns
// the write's revision.
func putScaleService(tb testing.TB, ctx context.Context, client *clientv3.Client, i int, svc *corev1.Service) int64 {
	tb.Helper()
	data, err := runtime.Encode(storageCodec(""), svc)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := client.Put(ctx, scaleServiceKey(i), string(data))
	if err != nil {
		tb.Fatal(err)
	}
	return resp.Header.Revision
}
