// Package e2e drives the allocator binary as separate processes: the API
// server (`allocator serve`) and the standalone job (`allocator repair`,
// `allocator migrate`), against a real etcd, the way an operator runs them.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testbin"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// buildBinary is cmd/allocator, built once per test binary run as the
// Dockerfile builds it (testbin.Allocator); TestMain removes it.
func buildBinary(t *testing.T) string { return testbin.Allocator(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// etcdEndpoints is where a server process finds etcd: a member
// (*etcdtest.Etcd), a cluster (*etcdtest.Cluster), or proxies in front of
// them (endpointList).
type etcdEndpoints interface{ Endpoints() []string }

// endpointList is etcd's client URLs as given.
type endpointList []string

func (l endpointList) Endpoints() []string { return l }

// startServe runs `allocator serve` as a process on etcd and returns the
// admin kubeconfig path once the server is ready.
func startServe(t *testing.T, bin string, etcd etcdEndpoints, args ...string) (string, kubernetes.Interface) {
	t.Helper()
	dataDir := t.TempDir()
	logPath := filepath.Join(dataDir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dataDir, "--secure-port", "0",
		"--etcd-servers", strings.Join(etcd.Endpoints(), ",")}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("server log (last lines):\n%s", tail(string(log), 60))
		}
	})
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	var client kubernetes.Interface
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := os.Stat(kubeconfig); err != nil {
			return false, nil
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, nil
		}
		if _, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return false, nil
		}
		if _, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		client = c
		return true, nil
	})
	if err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("allocator serve not ready: %v\n%s", err, tail(string(log), 30))
	}
	return kubeconfig, client
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// runJob runs the allocator binary and returns stdout and its exit code.
func runJob(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	t.Logf("allocator %s → exit %d\n%s%s", strings.Join(args[:1], " "), code, stdout.String(), stderr.String())
	return stdout.String(), code
}

func plantService(t *testing.T, etcd *etcdtest.Etcd, name, ip string) {
	t.Helper()
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uuid.NewUUID()),
			CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(80)}}},
	}
	value, err := etcdlayout.Encode(svc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client().Put(context.Background(), etcdlayout.Layout{}.Service("default", name), string(value)); err != nil {
		t.Fatal(err)
	}
}

// TestRepairCLIBitmap plants problems under a running bitmap-model server and
// repairs them with the standalone job.
func TestRepairCLIBitmap(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	kubeconfig, client := startServe(t, bin, etcd, "--allocator", "bitmap", "--service-cluster-ip-range", "10.0.0.0/24")
	ctx := context.Background()
	rng := subrange.MustNew(netip.MustParsePrefix("10.0.0.0/24"), model.Bitmap)
	store, err := clusterip.NewEtcdAllocator(etcd.Client(), "/registry/ranges/serviceips", rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A leaked bit and a Service whose IP is not allocated.
	if err := store.Allocate(ctx, netip.MustParseAddr("10.0.0.200"), allocation.Owner{}); err != nil {
		t.Fatal(err)
	}
	plantService(t, etcd, "planted", "10.0.0.50")
	// The server keeps IPAddresses beside its bits (dual write is on): the
	// one of default/kubernetes comes from its IPAddress repair, moments
	// after the bootstrap made the Service.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := client.CoreV1().Services("default").Get(ctx, "planted", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, err := client.NetworkingV1().IPAddresses().Get(ctx, "10.0.0.1", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("planted Service never served, or default/kubernetes never got its IPAddress")
	}
	common := []string{"--kubeconfig", kubeconfig, "--etcd-servers", strings.Join(etcd.Endpoints(), ",")}

	out, code := runJob(t, bin, append([]string{"repair", "--dry-run", "-o", "json"}, common...)...)
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("dry-run output is not a JSON report: %v\n%s", err, out)
	}
	if code != 2 || rep.Model != "bitmap" || !rep.DryRun || rep.Writes != 0 {
		t.Fatalf("dry run: exit %d, report %+v", code, rep)
	}
	found := map[string]bool{}
	for _, p := range rep.Problems {
		found[p.Type+" "+p.IP] = true
	}
	if !found["leak 10.0.0.200"] || !found["repair 10.0.0.50"] {
		t.Fatalf("dry run did not report the planted problems: %+v", rep.Problems)
	}
	if has, _ := store.Has(ctx, netip.MustParseAddr("10.0.0.50")); has {
		t.Fatalf("dry run marked 10.0.0.50")
	}

	out, code = runJob(t, bin, append([]string{"repair", "--leak-grace", "1s"}, common...)...)
	if code != 0 || !strings.Contains(out, "10.0.0.200") || !strings.Contains(out, "TYPE") {
		t.Fatalf("repair: exit %d\n%s", code, out)
	}
	if has, _ := store.Has(ctx, netip.MustParseAddr("10.0.0.50")); !has {
		t.Fatalf("repair did not mark 10.0.0.50")
	}
	if has, _ := store.Has(ctx, netip.MustParseAddr("10.0.0.200")); has {
		t.Fatalf("repair did not free the leaked 10.0.0.200")
	}
	events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil || !hasEvent(events.Items, "planted", report.ReasonNotAllocated) {
		t.Fatalf("no %s event on planted: %v", report.ReasonNotAllocated, err)
	}

	out, code = runJob(t, bin, append([]string{"repair", "-o", "json"}, common...)...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.Consistent() {
		t.Fatalf("second run: exit %d, %v, %+v", code, err, rep)
	}

	// What only a person can fix keeps the exit code non-zero.
	plantService(t, etcd, "outside", "10.9.9.9")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Services("default").Get(ctx, "outside", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("planted Service never served")
	}
	if _, code := runJob(t, bin, append([]string{"repair"}, common...)...); code != 2 {
		t.Fatalf("repair with an out-of-range Service: exit %d, want 2", code)
	}
}

// TestMigrateCLI migrates a bitmap-model cluster to IPAddresses and back with
// the standalone job.
func TestMigrateCLI(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	kubeconfig, client := startServe(t, bin, etcd, "--allocator", "bitmap", "--service-cluster-ip-range", "10.0.0.0/24")
	ctx := context.Background()
	for i := range 10 {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--kubeconfig", kubeconfig, "--etcd-servers", strings.Join(etcd.Endpoints(), ",")}
	// The bitmap-model server keeps IPAddresses true itself: its repair
	// creates them (internal/transition). The job then finds them all present;
	// what it does on a cluster without them (a kube-apiserver ≤ 1.32) is
	// covered by pkg/repair/iprepair's migration tests on upstream's data.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 11, nil
	}); err != nil {
		t.Fatalf("the bitmap-model server did not keep 11 IPAddresses: %v", err)
	}
	out, code := runJob(t, bin, append([]string{"migrate", "--to", "ipaddress", "-o", "json"}, common...)...)
	var rep iprepair.MigrationReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.DryRun || rep.Present != 11 || rep.Created != 0 {
		t.Fatalf("dry run: exit %d, %v, %+v", code, err, rep)
	}
	out, code = runJob(t, bin, append([]string{"migrate", "--to", "ipaddress", "--dry-run=false", "-o", "json"}, common...)...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.Verified || rep.Present != 11 {
		t.Fatalf("migrate: exit %d, %v, %+v", code, err, rep)
	}
	if list, _ := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{}); len(list.Items) != 11 {
		t.Fatalf("%d IPAddresses after migration, want 11", len(list.Items))
	}
	out, code = runJob(t, bin, append([]string{"migrate", "--to", "bitmap", "--dry-run=false", "-o", "json"}, common...)...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.Verified || rep.Present != 11 {
		t.Fatalf("migrate back: exit %d, %v, %+v", code, err, rep)
	}
	if _, code := runJob(t, bin, "migrate", "--to", "sideways", "--kubeconfig", kubeconfig); code != 1 {
		t.Fatalf("bad --to: exit %d, want 1", code)
	}
}

func hasEvent(events []corev1.Event, object, reason string) bool {
	for _, e := range events {
		if e.InvolvedObject.Name == object && e.Reason == reason {
			return true
		}
	}
	return false
}
