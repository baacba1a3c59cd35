package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestInformerSource: an informer on a resource's informer source (its
// etcd store with the informer's codec) syncs from what is stored, and
// follows a create, an update and a delete, holding what the informer
// keeps of each object (the slim Service, the compacted IPAddress); a
// source refuses selectors, and a watch from a compacted revision is 410
// Gone, as the registry store answers, so that the informer lists again.
func TestInformerSource(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	client := etcd.Client()
	put := func(group, key string, obj runtime.Object) int64 {
		t.Helper()
		data, err := runtime.Encode(storageCodec(group), obj)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Put(ctx, "/registry/"+key, string(data))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	svcKey := func(i int) string { return fmt.Sprintf("%s/scale/s-%06d", etcdlayout.ServicesPath, i) }
	ipKey := func(i int) string { return etcdlayout.IPAddressesPath + "/" + scaleIPAddress(i).Name }
	first := put("", svcKey(1), scaleService(1))
	put("", svcKey(2), scaleService(2))
	put(networkingv1.GroupName, ipKey(1), scaleIPAddress(1))

	for _, tc := range []struct {
		resource schema.GroupResource
		codec    func(runtime.Codec) runtime.Codec
		obj      runtime.Object
		newList  func() runtime.Object
		change   func() (key string, want map[string]runtime.Object)
	}{{
		resource: corev1.Resource("services"), codec: slimServiceCodec, obj: &corev1.Service{},
		newList: func() runtime.Object { return &corev1.ServiceList{} },
		change: func() (string, map[string]runtime.Object) {
			updated := scaleService(2)
			updated.Spec.Type = corev1.ServiceTypeNodePort
			updated.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			updated.Spec.Ports[0].NodePort = 30002
			put("", svcKey(2), updated)
			put("", svcKey(3), scaleService(3))
			if _, err := client.Delete(ctx, "/registry/"+svcKey(1)); err != nil {
				t.Fatal(err)
			}
			return "scale/s-000002", map[string]runtime.Object{"scale/s-000002": updated, "scale/s-000003": scaleService(3)}
		},
	}, {
		resource: networkingv1.Resource("ipaddresses"), codec: compactIPAddressCodec, obj: &networkingv1.IPAddress{},
		newList: func() runtime.Object { return &networkingv1.IPAddressList{} },
		change: func() (string, map[string]runtime.Object) {
			put(networkingv1.GroupName, ipKey(4), scaleIPAddress(4))
			return scaleIPAddress(4).Name, map[string]runtime.Object{scaleIPAddress(1).Name: scaleIPAddress(1), scaleIPAddress(4).Name: scaleIPAddress(4)}
		},
	}} {
		src, destroy, err := getter.informerSource(tc.resource, tc.codec, func() runtime.Object { return tc.obj.DeepCopyObject() }, tc.newList)
		if err != nil {
			t.Fatal(err)
		}
		defer destroy()
		if _, err := src.List(ctx, &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"a": "b"})}); err == nil {
			t.Errorf("%s: a list with a label selector was answered", tc.resource)
		}
		w, err := src.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: fmt.Sprint(first - 1)})
		if err != nil {
			t.Fatalf("%s: watch from revision %d: %v", tc.resource, first-1, err)
		}
		w.Stop()

		ss := newStoreSource()
		ss.set(src)
		informer := cache.NewSharedIndexInformer(storeListWatch{src: ss}, tc.obj, 0, cache.Indexers{})
		if err := informer.SetTransform(informerTransform); err != nil {
			t.Fatal(err)
		}
		ictx, stop := context.WithCancel(ctx)
		go informer.RunWithContext(ictx)
		if !cache.WaitForCacheSync(ictx.Done(), informer.HasSynced) {
			t.Fatalf("%s: the informer never synced", tc.resource)
		}
		_, want := tc.change()
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(informer.GetStore().ListKeys()) == len(want) && cachedEqual(informer.GetStore(), want) == "", nil
		})
		if err != nil {
			t.Errorf("%s: the informer holds (-want +got):\n%s", tc.resource, cachedEqual(informer.GetStore(), want))
		}
		stop()
	}

	// A watch from a revision etcd compacted away: 410 Gone.
	last := put("", svcKey(9), scaleService(9))
	if _, err := client.Compact(ctx, last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	w, err := serviceSource(t, getter).Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: fmt.Sprint(first)})
	if err == nil {
		ev := <-w.ResultChan()
		w.Stop()
		err = apierrors.FromObject(ev.Object)
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("watch from compacted revision %d: %v, want 410 Gone", first, err)
	}
}

// cachedEqual compares what store holds with what the informer keeps of
// each object in want (by key), ignoring resourceVersions; "" when equal.
func cachedEqual(store cache.Store, want map[string]runtime.Object) string {
	var diff string
	for key, obj := range want {
		got, ok, err := store.GetByKey(key)
		if err != nil || !ok {
			diff += fmt.Sprintf("%s: not cached (%v)\n", key, err)
			continue
		}
		kept, err := informerTransform(obj.DeepCopyObject())
		if err != nil {
			return err.Error()
		}
		ignoreRV := func(o any) any {
			c := o.(runtime.Object).DeepCopyObject()
			c.(interface{ SetResourceVersion(string) }).SetResourceVersion("")
			c.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			return c
		}
		diff += cmp.Diff(ignoreRV(kept), ignoreRV(got))
	}
	return diff
}
