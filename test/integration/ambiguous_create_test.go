package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdquota"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestCreateStoredDespiteError: etcd rejects a write that would exceed its
// quota before proposing it, but writes proposed together can each pass
// that check, and then each is applied and still answered "database space
// exceeded". The Service store's fence reads the write's marker after that
// answer, so a create etcd applied is answered as created; a create answered
// with the error was not stored, or, when even the marker could not be read,
// was read back and keeps its address (else the next create could take it:
// a duplicate). Large Services created by concurrent clients fill etcd; the
// test fails if no create met the quota (it would check nothing).
func TestCreateStoredDespiteError(t *testing.T) {
	t.Parallel()
	createsStoredDespiteError(t)
}

// checkStoredKeepAddress reads back from etcd each Service whose write
// (what) failed with "database space exceeded"; for each that the write
// reached (written says so), its ClusterIP's IPAddress must still exist. It
// returns how many the writes reached.
func checkStoredKeepAddress(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, what string, failed []string, written func(*corev1.Service) bool) int {
	t.Helper()
	storedAnyway := 0
	for _, name := range failed {
		resp, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.Service("default", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		svc, err := etcdlayout.DecodeService(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if !written(svc) {
			continue
		}
		storedAnyway++
		ip := svc.Spec.ClusterIP
		ipa, err := etcd.Client().Get(ctx, etcdlayout.Layout{}.IPAddress(ip))
		if err != nil {
			t.Fatal(err)
		}
		if len(ipa.Kvs) == 0 {
			t.Errorf("%s was stored with %s although its %s failed, and %s was released: the next Service may take it", name, ip, what, ip)
		}
	}
	t.Logf("%d %ss failed with database space exceeded, %d of them stored anyway", len(failed), what, storedAnyway)
	if len(failed) == 0 {
		t.Errorf("no %s failed with database space exceeded: etcd's quota was never met, nothing was checked", what)
	}
	return storedAnyway
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
					if etcdquota.Exceeded(err) {
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
	return checkStoredKeepAddress(t, ctx, etcd, "create", failed, func(*corev1.Service) bool { return true })
}

// TestUpdateStoredDespiteError is TestCreateStoredDespiteError for updates:
// an update that makes an ExternalName Service a ClusterIP one claims an
// address (an IPAddress); one etcd applied and answered "database space
// exceeded" is answered as applied, and one answered with the error was not
// stored, or, stored anyway, keeps the address it claimed. Concurrent
// updates adding large annotations fill etcd.
func TestUpdateStoredDespiteError(t *testing.T) {
	t.Parallel()
	updatesStoredDespiteError(t)
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
					if etcdquota.Exceeded(err) {
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
	return checkStoredKeepAddress(t, ctx, etcd, "update", failed, func(svc *corev1.Service) bool {
		return svc.Spec.Type == corev1.ServiceTypeClusterIP
	})
}
