package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestCreateStoredDespiteError: etcd rejects a write that would exceed its
// quota before proposing it, but writes proposed together can each pass
// that check, and then each is applied and still answered "database space
// exceeded". When such a write is a Service create, the Service is stored
// although the create failed; its address must stay held (the create reads
// the Service back before it releases), or the next create could take it:
// a duplicate. Large Services created by concurrent clients make that
// likely; up to four rounds run until one stores a failed create (about
// half do), and a test where none did checks nothing and says so.
func TestCreateStoredDespiteError(t *testing.T) {
	for round := 1; round <= 4; round++ {
		if n := createsStoredDespiteError(t); n > 0 {
			return
		}
		t.Logf("round %d: no failed create was stored", round)
	}
	t.Skip("no failed create was stored in four rounds; nothing to check")
}

// createsStoredDespiteError fills a fresh etcd to its quota with concurrent
// creates, checks every failed create found stored anyway, and returns
// how many there were.
func createsStoredDespiteError(t *testing.T) int {
	etcd := etcdtest.NewWithQuota(t, 4<<20)
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/16", etcd: etcd})
	ctx := testContext(t)
	big := strings.Repeat("x", 150<<10)
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for w := range 12 {
		wg.Go(func() {
			for i := range 20 {
				svc := newService(fmt.Sprintf("big-%02d-%02d", w, i))
				svc.Annotations = map[string]string{"example.com/padding": big}
				if _, err := create(ctx, s.client, svc); err != nil {
					if strings.Contains(err.Error(), "database space exceeded") {
						mu.Lock()
						failed = append(failed, svc.Name)
						mu.Unlock()
					}
					return
				}
			}
		})
	}
	wg.Wait()
	storedAnyway := 0
	for _, name := range failed {
		resp, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.Service("default", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		storedAnyway++
		svc, err := etcdlayout.DecodeService(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		ip := svc.Spec.ClusterIP
		ipa, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.IPAddress(ip))
		if err != nil {
			t.Fatal(err)
		}
		if len(ipa.Kvs) == 0 {
			t.Errorf("%s was stored with %s although its create failed, and %s was released: the next create may take it", name, ip, ip)
		}
	}
	t.Logf("%d creates failed with database space exceeded, %d of them stored anyway", len(failed), storedAnyway)
	return storedAnyway
}

// TestUpdateStoredDespiteError is TestCreateStoredDespiteError for updates:
// an update that makes an ExternalName Service a ClusterIP one claims an
// address (an IPAddress), and when its write is applied and still answered
// "database space exceeded", the stored Service holds that address although
// the update failed. The address must stay held (the update reads the
// Service back before it settles), or the next Service could take it: a
// duplicate. Concurrent updates adding large annotations make that likely;
// up to six rounds run until one stores a failed update.
func TestUpdateStoredDespiteError(t *testing.T) {
	for round := 1; round <= 6; round++ {
		if n := updatesStoredDespiteError(t); n > 0 {
			return
		}
		t.Logf("round %d: no failed update was stored", round)
	}
	t.Skip("no failed update was stored in six rounds; nothing to check")
}

// updatesStoredDespiteError creates small ExternalName Services on a fresh
// etcd, fills it to its quota with concurrent updates to ClusterIP with a
// large annotation, checks every failed update found stored anyway, and
// returns how many there were.
func updatesStoredDespiteError(t *testing.T) int {
	etcd := etcdtest.NewWithQuota(t, 4<<20)
	s := startServer(t, serverOptions{model: string(model.IPAddress), serviceRange: "10.96.0.0/16", etcd: etcd})
	ctx := testContext(t)
	const workers, each = 12, 20
	for w := range workers {
		for i := range each {
			mustCreate(t, ctx, s.client, newService(fmt.Sprintf("svc-%02d-%02d", w, i), func(svc *corev1.Service) {
				svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.org"
			}))
		}
	}
	big := strings.Repeat("x", 150<<10)
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("svc-%02d-%02d", w, i)
				svc, err := s.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return
				}
				svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeClusterIP, ""
				svc.Annotations = map[string]string{"example.com/padding": big}
				if _, err := s.client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
					if strings.Contains(err.Error(), "database space exceeded") {
						mu.Lock()
						failed = append(failed, name)
						mu.Unlock()
					}
					return
				}
			}
		})
	}
	wg.Wait()
	storedAnyway := 0
	for _, name := range failed {
		resp, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.Service("default", name))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := etcdlayout.DecodeService(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP {
			continue
		}
		storedAnyway++
		ip := svc.Spec.ClusterIP
		ipa, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.IPAddress(ip))
		if err != nil {
			t.Fatal(err)
		}
		if len(ipa.Kvs) == 0 {
			t.Errorf("%s was stored with %s although its update failed, and %s was released: the next Service may take it", name, ip, ip)
		}
	}
	t.Logf("%d updates failed with database space exceeded, %d of them stored anyway", len(failed), storedAnyway)
	return storedAnyway
}
