package integration

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestWatchCacheKeepsManagedFields: the server's own informers read its
// stores in process and drop managedFields from what they keep; what the
// stores serve must keep them (a list at resourceVersion "0" is served from
// a watch cache, or from etcd for the Services and IPAddresses, which have
// none by default). Objects made before the server starts reach the
// informers as initial events, those made after as watch events.
func TestWatchCacheKeepsManagedFields(t *testing.T) {
	t.Parallel()
	forEachModel(t, testWatchCacheKeepsManagedFields)
}

func testWatchCacheKeepsManagedFields(t *testing.T, model string) {
	ctx := testContext(t)
	srv := startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: model})
	mustCreate(t, ctx, srv.client, newService("before"))
	srv.stop()
	srv = startServer(t, serverOptions{serviceRange: "10.0.0.0/24", model: model, etcd: srv.etcd, dataDir: srv.dataDir})
	c := srv.client
	mustCreate(t, ctx, c, newService("after"))
	// Let the informers see every event (they are not observable from
	// here; the allocator's readiness covers only their first sync).
	time.Sleep(2 * time.Second)

	// check lists what at resourceVersion "0" and wants at least min
	// objects, each with managedFields.
	check := func(what string, min int, list func(metav1.ListOptions) (runtime.Object, error)) {
		t.Helper()
		l, err := list(metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatalf("list %s: %v", what, err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) < min {
			t.Errorf("listed %d %s, want at least %d", len(items), what, min)
		}
		for _, item := range items {
			m, err := meta.Accessor(item)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.GetManagedFields()) == 0 {
				t.Errorf("%s %s served without managedFields", what, m.GetName())
			}
		}
	}
	check("Services", 3, func(o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Services(metav1.NamespaceDefault).List(ctx, o)
	})
	check("Namespaces", 1, func(o metav1.ListOptions) (runtime.Object, error) { return c.CoreV1().Namespaces().List(ctx, o) })
	if model == "ipaddress" {
		check("IPAddresses", 3, func(o metav1.ListOptions) (runtime.Object, error) {
			return c.NetworkingV1().IPAddresses().List(ctx, o)
		})
		check("ServiceCIDRs", 1, func(o metav1.ListOptions) (runtime.Object, error) {
			return c.NetworkingV1().ServiceCIDRs().List(ctx, o)
		})
	}
}
