package apiserver

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"

	"github.com/allocator/allocator/internal/etcdtest"
)

func TestParseWatchCacheSizes(t *testing.T) {
	t.Parallel()
	svc, ipa, cidr := corev1.Resource("services"), networkingv1.Resource("ipaddresses"), networkingv1.Resource("servicecidrs")
	for _, c := range []struct {
		in   []string
		want []schema.GroupResource // without a watch cache
		err  string
	}{
		{DefaultWatchCacheSizes, []schema.GroupResource{ipa, svc}, ""},
		{nil, nil, ""},
		{[]string{"services#100", "ipaddresses.networking.k8s.io#0"}, []schema.GroupResource{ipa}, ""},
		{[]string{"services#0", "services#5"}, nil, ""}, // the last entry of a resource wins
		{[]string{"servicecidrs.networking.k8s.io#0"}, []schema.GroupResource{cidr}, ""},
		{[]string{"services"}, nil, "RESOURCE[.GROUP]#SIZE"},
		{[]string{"services#-1"}, nil, "0 or more"},
		{[]string{"services#x"}, nil, "0 or more"},
		{[]string{"pods#0"}, nil, "this server serves services, "},
		{[]string{"ipaddresses#0"}, nil, "this server serves"}, // the core group has none
	} {
		got, err := ParseWatchCacheSizes(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error naming %q", c.in, err, c.err)
			}
			continue
		}
		keys := slices.SortedFunc(maps.Keys(got), func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
		if err != nil || !slices.Equal(keys, c.want) {
			t.Errorf("%q: %v, %v; want %v", c.in, keys, err, c.want)
		}
	}
}

// TestStoresWithoutWatchCache: a resource in uncached gets the etcd3 store
// alone, the others the store below a watch cache.
func TestStoresWithoutWatchCache(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	getter := newRESTOptionsGetter(etcd.Endpoints(), "/registry", EtcdTLS{}, etcd, nil, nil)
	getter.stores.uncached = map[schema.GroupResource]bool{corev1.Resource("services"): true}
	for gr, wantCache := range map[schema.GroupResource]bool{corev1.Resource("services"): false, corev1.Resource("namespaces"): true} {
		opts, err := getter.GetRESTOptions(gr, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, destroy, err := opts.Decorator(opts.StorageConfig, opts.ResourcePrefix,
			func(obj runtime.Object) (string, error) { return storage.NoNamespaceKeyFunc(opts.ResourcePrefix, obj) },
			func() runtime.Object { return &corev1.Service{} }, func() runtime.Object { return &corev1.ServiceList{} },
			storage.DefaultNamespaceScopedAttr, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, cached := st.(*cacherstorage.CacheDelegator)
		destroy()
		if cached != wantCache {
			t.Errorf("%s: below a watch cache %v, want %v", gr, cached, wantCache)
		}
	}
}
