package integration

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWatchCacheKeepsManagedFields: the server's own informers read its
// stores in process and drop managedFields from what they keep; the watch
// cache they read must keep them (a list or get at resourceVersion "0" is
// served from it). Objects made before the server starts reach the
// informers as initial events, those made after as watch events.
func TestWatchCacheKeepsManagedFields(t *testing.T) {
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

	check := func(what string, managed func() (map[string]int, error)) {
		t.Helper()
		got, err := managed()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for name, n := range got {
			if n == 0 {
				t.Errorf("%s %s served from the watch cache without managedFields", what, name)
			}
		}
	}
	cached := metav1.ListOptions{ResourceVersion: "0"}
	check("Service", func() (map[string]int, error) {
		l, err := c.CoreV1().Services(metav1.NamespaceDefault).List(ctx, cached)
		if err != nil {
			return nil, err
		}
		m := map[string]int{}
		for _, s := range l.Items {
			m[s.Name] = len(s.ManagedFields)
		}
		if len(m) < 3 {
			return nil, fmt.Errorf("listed %v, want kubernetes, before and after", m)
		}
		return m, nil
	})
	check("Namespace", func() (map[string]int, error) {
		l, err := c.CoreV1().Namespaces().List(ctx, cached)
		if err != nil {
			return nil, err
		}
		m := map[string]int{}
		for _, s := range l.Items {
			m[s.Name] = len(s.ManagedFields)
		}
		return m, nil
	})
	if model == "ipaddress" {
		check("IPAddress", func() (map[string]int, error) {
			l, err := c.NetworkingV1().IPAddresses().List(ctx, cached)
			if err != nil {
				return nil, err
			}
			m := map[string]int{}
			for _, s := range l.Items {
				m[s.Name] = len(s.ManagedFields)
			}
			if len(m) < 3 {
				return nil, fmt.Errorf("listed %v, want three", m)
			}
			return m, nil
		})
		check("ServiceCIDR", func() (map[string]int, error) {
			l, err := c.NetworkingV1().ServiceCIDRs().List(ctx, cached)
			if err != nil {
				return nil, err
			}
			m := map[string]int{}
			for _, s := range l.Items {
				m[s.Name] = len(s.ManagedFields)
			}
			return m, nil
		})
	}
}
