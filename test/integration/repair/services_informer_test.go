package repair_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// informerLag is how long the tests' Service informer holds each watch
// event back: longer than a pass, so a pass that read the informer as it is
// would miss a Service created (or keep one deleted) right before it.
const informerLag = 300 * time.Millisecond

// laggingInformer is a started and synced Service informer on client whose
// watch events each arrive lag after the server sent them.
func laggingInformer(t *testing.T, ctx context.Context, client kubernetes.Interface, lag time.Duration) cache.SharedIndexInformer {
	t.Helper()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := client.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return delayed(w, lag), nil
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &corev1.Service{}, 0, cache.Indexers{})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the Service informer did not sync")
	}
	return informer
}

// delayed passes w's events on, each lag after it arrived, in order.
func delayed(w watch.Interface, lag time.Duration) watch.Interface {
	type stamped struct {
		ev      watch.Event
		arrived time.Time
	}
	queue := make(chan stamped, 100000)
	out := make(chan watch.Event)
	stop := make(chan struct{})
	go func() {
		defer close(queue)
		for ev := range w.ResultChan() {
			queue <- stamped{ev, time.Now()}
		}
	}()
	go func() {
		defer close(out)
		for s := range queue {
			select {
			case <-time.After(time.Until(s.arrived.Add(lag))):
			case <-stop:
				return
			}
			select {
			case out <- s.ev:
			case <-stop:
				return
			}
		}
	}()
	return &delayedWatch{Interface: w, out: out, stop: stop}
}

type delayedWatch struct {
	watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (d *delayedWatch) ResultChan() <-chan watch.Event { return d.out }

func (d *delayedWatch) Stop() {
	d.once.Do(func() { close(d.stop) })
	d.Interface.Stop()
}

// informerRepair is a node-port repair of srv's map that reads the Services
// from informer (repair.InformerServices), and counts the passes that fell
// back to the paged list.
func informerRepair(t *testing.T, srv *testserver.Server, informer cache.SharedIndexInformer, opts repair.Options) (*repair.NodePortRepair, *nodeport.EtcdAllocator, *atomic.Int32) {
	t.Helper()
	etcd := srv.Etcd.Client()
	store, err := nodeport.NewEtcd(etcd, etcdlayout.Layout{}.ServiceNodePortRange(), nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fallbacks := &atomic.Int32{}
	opts.Client = srv.Client
	opts.Services = repair.InformerServices{Informer: informer, Etcd: etcd, Prefix: etcdlayout.Layout{}.ServicesPrefix(),
		List: func(ctx context.Context) ([]*corev1.Service, error) {
			fallbacks.Add(1)
			return repair.Options{Client: srv.Client}.ListServices(ctx)
		}}
	r, err := repair.NewNodePortRepair(repair.NodePortConfig{Options: opts, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return r, store, fallbacks
}

func nodePortService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

// TestNodePortRepairFromLaggingInformer runs node-port passes on an
// informer that lags the server: the pass waits until the informer holds
// every Service write made before it read the map, so a Service created
// right before the pass is neither a leak nor missing, and a Service deleted
// right before it (its port released) is not set again; with no Service
// write since the informer's last event, the pass does not wait for one.
func TestNodePortRepairFromLaggingInformer(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})
	informer := laggingInformer(t, ctx, srv.Client, informerLag)
	ctrl, store, fallbacks := informerRepair(t, srv, informer, repair.Options{})
	noProblems := func(t *testing.T, rep *report.Report) {
		t.Helper()
		for _, p := range rep.Problems {
			t.Errorf("problem %s %s %s: %s", p.Type, p.IP, p.Service, p.Message)
		}
		if n := fallbacks.Load(); n != 0 {
			t.Errorf("%d passes fell back to the paged list", n)
		}
	}

	created, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, nodePortService("fresh"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := int(created.Spec.Ports[0].NodePort)
	t.Run("CreatedRightBefore", func(t *testing.T) {
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		noProblems(t, rep)
		if rep.Services != 2 { // and kubernetes
			t.Errorf("the pass saw %d Services, want 2", rep.Services)
		}
	})

	t.Run("DeletedRightBefore", func(t *testing.T) {
		if err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, "fresh", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		noProblems(t, rep)
		if has, err := store.Has(ctx, port); err != nil || has {
			t.Errorf("port %d of the deleted Service is allocated (%v), want free", port, err)
		}
	})

	t.Run("NoServiceWriteSince", func(t *testing.T) {
		// Writes of other keys move etcd's revision past the informer's.
		for i := range 5 {
			if _, err := srv.Etcd.Client().Put(ctx, "/unrelated/"+strconv.Itoa(i), "x"); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		noProblems(t, rep)
		if took := time.Since(start); took > repair.InformerCatchUp/2 {
			t.Errorf("the pass took %v: it waited for a Service event", took)
		}
	})
}

// TestNodePortRepairFromInformerUnderChurn runs node-port passes back to
// back on a lagging informer while Services with node ports are created
// and deleted, with the leak grace as short as it goes (the write leases
// alone guard creates in flight): a pass that missed a stored Service would
// report its port leaked and free it on the third such pass, and one that
// kept a deleted Service would set its released port again. No pass may
// find a port not allocated or free a leak, and in the end the map holds
// exactly the ports of the Services left.
func TestNodePortRepairFromInformerUnderChurn(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/22"})
	informer := laggingInformer(t, ctx, srv.Client, informerLag/2)
	ctrl, store, fallbacks := informerRepair(t, srv, informer, repair.Options{LeakGrace: time.Nanosecond,
		InFlight: fence.InFlight{KV: srv.Etcd.Client().KV, Layout: etcdlayout.Layout{}}})

	// Clients create churn-1…churn-n; every third create also deletes the
	// Service two before it.
	const n, clients = 600, 4
	var next atomic.Int64
	var churn sync.WaitGroup
	for range clients {
		churn.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				if _, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, nodePortService(fmt.Sprintf("churn-%d", i)), metav1.CreateOptions{}); err != nil {
					t.Errorf("create churn-%d: %v", i, err)
				}
				if i%3 == 0 {
					err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, fmt.Sprintf("churn-%d", i-2), metav1.DeleteOptions{})
					if err != nil && !apierrors.IsNotFound(err) {
						t.Errorf("delete churn-%d: %v", i-2, err)
					}
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		churn.Wait()
		close(done)
	}()
	passes := 0
	for running := true; running; passes++ {
		select {
		case <-done:
			running = false
		default:
		}
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Problems {
			if p.Reason == repair.ReasonPortNotAllocated || (p.Type == report.TypeLeak && p.Fixed) {
				t.Errorf("pass %d: %s %s %s: %s", passes, p.Type, p.IP, p.Service, p.Message)
			}
		}
	}
	t.Logf("%d passes, %d fell back to the paged list", passes, fallbacks.Load())
	if n := fallbacks.Load(); n != 0 {
		t.Errorf("%d passes fell back to the paged list", n)
	}

	list, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	for _, svc := range list.Items {
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				held = append(held, int(p.NodePort))
			}
		}
	}
	var allocated []int
	if err := store.ForEach(ctx, func(port int) { allocated = append(allocated, port) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(held)
	slices.Sort(allocated)
	if !slices.Equal(held, allocated) {
		t.Errorf("allocated node ports %v, want those of the Services left %v", allocated, held)
	}
}
