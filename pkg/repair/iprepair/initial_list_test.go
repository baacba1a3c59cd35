package iprepair

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// TestInitialListQueuesNothing: the objects of the informers' initial lists
// queue no address (the first full pass reconciles them all); an object
// added after them queues its address.
func TestInitialListQueuesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}}}
	}
	var objs []runtime.Object
	for i := range 50 {
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		objs = append(objs, svc(fmt.Sprintf("s%d", i), ip),
			&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip}})
	}
	objs = append(objs, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}})
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	view, err := newRepairView(factory)
	if err != nil {
		t.Fatal(err)
	}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	run := &repairRun{queue: queue, view: view}
	synced, unwatch, err := run.watch(factory)
	defer unwatch()
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }() // the informers stop with ctx
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("handlers did not sync")
	}
	if n := queue.Len(); n != 0 {
		t.Fatalf("%d addresses queued by the initial lists, want none", n)
	}

	// An Add after the sync (the fake clientset's watch delivers late, so
	// the handler is called as the informer calls it).
	run.addService(svc("late", "10.0.0.200"), false)
	if k, _ := queue.Get(); k != "10.0.0.200" {
		t.Errorf("queued %q after a Service added, want 10.0.0.200", k)
	}
}
