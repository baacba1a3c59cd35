package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestKillMidWriteEmbeddedEtcd: `allocator serve` on its embedded etcd is
// killed (SIGKILL: the server and its etcd member die together) while
// creates and type changes from clients that give up after 1 s are in
// flight; it is started again on the same data dir, and the range is then
// filled, which hands out anything wrongly left free. Read from its etcd
// afterwards: no ClusterIP or node port held by two Services, everything a
// stored Service holds reserved for it, and every acknowledged create stored
// with what it was acknowledged with.
func TestKillMidWriteEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		t.Run(string(m), func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			args := []string{"--allocator", string(m), "--service-cluster-ip-range", "10.0.0.0/25",
				"--service-node-port-range", "30000-30149"}
			s := startEmbedded(t, bin, dataDir, args...)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()

			acked := runUntilKilled(t, ctx, s, 40)
			s = startEmbedded(t, bin, dataDir, args...)
			created := fillRange(t, ctx, s.client)
			t.Logf("%d writes acknowledged before the kill; %d Services created after the restart until the range was full", len(acked), created)

			etcd := embeddedEtcdClient(t, s)
			report, err := invariants.Check(ctx, etcd, etcdlayout.Layout{}, m)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(report.Summary())
			if !report.OK() {
				t.Errorf("after the kill, the restart and the fill:\n%s", report)
			}
			for name, want := range acked {
				got, ok := report.Services["default/"+name]
				if !ok {
					t.Errorf("acknowledged create of %s is not stored", name)
					continue
				}
				if strings.Join(got.IPs, ",") != strings.Join(want.IPs, ",") {
					t.Errorf("%s acknowledged with %v, stored with %v", name, want.IPs, got.IPs)
				}
			}
		})
	}
}

// runUntilKilled runs creates of ClusterIP Services and their change to
// NodePort from 8 clients with a 1 s timeout, and kills the server with
// SIGKILL once kills writes have been acknowledged (or 20 s have passed).
// It returns the acknowledged creates, by name, with what they hold.
func runUntilKilled(t *testing.T, ctx context.Context, s *embeddedServer, kills int) map[string]invariants.Holding {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout, cfg.QPS, cfg.Burst = time.Second, 1000, 1000 // ?timeout=1s on every request
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svcs := client.CoreV1().Services("default")
	var (
		mu      sync.Mutex
		acked   = map[string]invariants.Holding{}
		answers atomic.Int32
		next    atomic.Int32
		wg      sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	for range 8 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				name := fmt.Sprintf("k%03d", next.Add(1))
				svc, err := svcs.Create(loadCtx, newService(name), metav1.CreateOptions{})
				if err != nil {
					continue
				}
				answers.Add(1)
				mu.Lock()
				acked[name] = invariants.HoldingOf(svc)
				mu.Unlock()
				svc.Spec.Type = corev1.ServiceTypeNodePort
				if _, err := svcs.Update(loadCtx, svc, metav1.UpdateOptions{}); err == nil {
					answers.Add(1)
				}
			}
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for answers.Load() < int32(kills) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s.done <- errors.New("killed")
	stopLoad()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return acked
}

// fillRange creates NodePort Services until the ClusterIP range or the
// node-port range is full, and returns how many it created.
func fillRange(t *testing.T, ctx context.Context, client kubernetes.Interface) int {
	t.Helper()
	svcs := client.CoreV1().Services("default")
	for i := 0; i < 300; i++ {
		svc := newService(fmt.Sprintf("fill%03d", i))
		svc.Spec.Type = corev1.ServiceTypeNodePort
		_, err := svcs.Create(ctx, svc, metav1.CreateOptions{})
		switch {
		case err == nil:
		case apierrors.IsInternalError(err) && (strings.Contains(err.Error(), "range is full")):
			return i
		default:
			t.Fatalf("fill: create %s: %v", svc.Name, err)
		}
	}
	t.Fatal("fill: the ranges never filled")
	return 0
}

// embeddedEtcdClient is a client of s's embedded etcd with the certificate
// files serve printed.
func embeddedEtcdClient(t *testing.T, s *embeddedServer) *clientv3.Client {
	t.Helper()
	tlsCfg, err := transport.TLSInfo{CertFile: s.flag("--etcd-certfile"), KeyFile: s.flag("--etcd-keyfile"),
		TrustedCAFile: s.flag("--etcd-cafile")}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.MinVersion = tls.VersionTLS12
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.flag("--etcd-servers")}, TLS: tlsCfg,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
