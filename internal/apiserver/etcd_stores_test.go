package apiserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/registry/namespaces"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestInProcessStores: a store built on the in-process etcd writes
// kube-apiserver's key with its encoding (read back over gRPC), compacts
// etcd's history as kube-apiserver does (an old revision becomes
// unreadable), and destroying the last store stops the compactor.
func TestInProcessStores(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	// The compactor compacts, every interval, up to the revision the
	// previous interval ended at.
	getter.base.CompactionInterval = 100 * time.Millisecond
	stores := getter.stores
	nsREST, err := namespaces.NewREST(Scheme, getter)
	if err != nil {
		t.Fatal(err)
	}
	created, err := nsREST.Create(request.WithNamespace(ctx, ""), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := etcd.Client()
	got, err := client.Get(ctx, "/registry/"+etcdlayout.NamespacesPath+"/team-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 {
		t.Fatalf("namespace team-a not at kube-apiserver's key over gRPC: %v", got.Kvs)
	}
	stored, err := etcdlayout.DecodeNamespace(got.Kvs[0].Value)
	if err != nil {
		t.Fatalf("stored value is not kube-apiserver's encoding: %v", err)
	}
	if stored.UID != created.(*corev1.Namespace).UID {
		t.Fatalf("stored UID %s, created %s", stored.UID, created.(*corev1.Namespace).UID)
	}

	first := got.Kvs[0].ModRevision
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		// A write per poll, so the compactor always has a newer revision.
		if _, err := client.Put(ctx, "/registry/test/tick", time.Now().String()); err != nil {
			return false, err
		}
		_, err := client.Get(ctx, "/registry/test/tick", clientv3.WithRev(first))
		return errors.Is(err, rpctypes.ErrCompacted), nil
	})
	if err != nil {
		t.Fatalf("revision %d never compacted with a 100 ms compaction interval: %v", first, err)
	}

	nsREST.Destroy()
	stores.mu.Lock()
	refs, compactor := stores.refs, stores.compactor
	stores.mu.Unlock()
	if refs != 0 || compactor != nil {
		t.Fatalf("after the last store's Destroy: %d stores left, compactor %v", refs, compactor)
	}
}

// TestInProcessEndpointFeatureCheck: k8s.io/apiserver's feature check finds
// that the in-process etcd supports progress requests (without which the
// watch cache sends every consistent LIST to etcd) through
// inProcessEndpoint, and cannot through the bare in-process client, which
// has no endpoint to ask.
func TestInProcessEndpointFeatureCheck(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := etcd.InProcessClient()
	defer client.Close()

	bare := etcdfeature.NewDefaultFeatureSupportChecker()
	bare.CheckClient(ctx, client, storage.RequestWatchProgress)
	checker := etcdfeature.NewDefaultFeatureSupportChecker()
	checker.CheckClient(ctx, inProcessEndpoint{client}, storage.RequestWatchProgress)
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return checker.Supports(storage.RequestWatchProgress), nil
	})
	if err != nil {
		t.Fatalf("the feature check never found progress requests supported through inProcessEndpoint: %v", err)
	}
	if bare.Supports(storage.RequestWatchProgress) {
		t.Error("the bare in-process client passed the feature check: inProcessEndpoint is not needed")
	}
}
