package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// warmStartLine is serve's line for an informer started from its
// warm-start file.
var warmStartLine = regexp.MustCompile(`"Starting from the warm-start file" logger="warm-start" file="(\w+)" objects=(\d+)`)

// warmStarts returns, by file, the objects the log says each informer
// started from.
func warmStarts(log string) map[string]string {
	got := map[string]string{}
	for _, m := range warmStartLine.FindAllStringSubmatch(log, -1) {
		got[m[1]] = m[2]
	}
	return got
}

// atLeastOne reports whether the number n is in [1, most].
func atLeastOne(n string, most int) bool {
	v, err := strconv.Atoi(n)
	return err == nil && 1 <= v && v <= most
}

// createDistinct creates n Services named prefix-i and records the
// ClusterIP each got in held (an address held already fails t).
func createDistinct(t *testing.T, ctx context.Context, c kubernetes.Interface, prefix string, n int, held map[string]string) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		svc, err := c.CoreV1().Services("default").Create(ctx, newService(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if other, ok := held[svc.Spec.ClusterIP]; ok {
			t.Errorf("%s got %s, which %s holds", name, svc.Spec.ClusterIP, other)
		}
		held[svc.Spec.ClusterIP] = name
	}
}

// TestWarmStart: serve stopped with SIGTERM leaves its Service and
// IPAddress stores in <data-dir>/warm-start; the next start takes every
// object from there (its log says how many) and removes the files; its
// allocator then hands out no address a Service held before the restart.
// A server killed with SIGKILL writes no files, so the start after it
// lists, and allocates as correctly.
func TestWarmStart(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--allocator", "ipaddress", "--service-cluster-ip-range", "10.0.0.0/24", "-v", "2"}
	s := startEmbedded(t, bin, "", args...)
	held := map[string]string{"10.0.0.1": "kubernetes"}
	createDistinct(t, ctx, s.client, "before", 30, held)
	if _, err, exited := s.stop(t, 30*time.Second); !exited || err != nil {
		t.Fatalf("stop: exited=%v err=%v\n%s", exited, err, tail(s.log.String(), 20))
	}
	warmDir := filepath.Join(s.dataDir, "warm-start")
	for _, file := range []string{"services", "ipaddresses"} {
		if _, err := os.Stat(filepath.Join(warmDir, file)); err != nil {
			t.Fatalf("after SIGTERM: %v\n%s", err, tail(s.log.String(), 20))
		}
	}

	s = startEmbedded(t, bin, s.dataDir, args...)
	// The 30 and default/kubernetes, or fewer when a create's event had not
	// reached the caches at the stop (the watch from the files' version
	// brings it).
	if got := warmStarts(s.log.String()); !atLeastOne(got["services"], 31) || !atLeastOne(got["ipaddresses"], 31) {
		t.Errorf("the restart started from %v objects of its warm-start files, want 1 to 31 of each", got)
	}
	if entries, _ := os.ReadDir(warmDir); len(entries) != 0 {
		t.Errorf("files left in %s after the start read them: %v", warmDir, entries)
	}
	createDistinct(t, ctx, s.client, "after", 30, held)

	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	s = startEmbedded(t, bin, s.dataDir, args...)
	if got := warmStarts(s.log.String()); len(got) != 0 {
		t.Errorf("a start after SIGKILL started from warm-start files: %v", got)
	}
	createDistinct(t, ctx, s.client, "killed", 30, held)
	list, err := s.client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 91 {
		t.Errorf("%d Services stored, want 91", len(list.Items))
	}
}

// TestWarmStartAfterSIGTERMUnderLoad: serve stopped with SIGTERM while 8
// clients create and delete Services writes its warm-start files after the
// writes in flight have drained, which come after its caches' version; the
// restart starts from the files, and its caches must end where etcd is:
// the Services and IPAddresses its count metric reports (counted from those
// caches) reach etcd's counts, and etcd holds no address twice and none
// without its IPAddress.
func TestWarmStartAfterSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--allocator", "ipaddress", "--service-cluster-ip-range", "10.0.0.0/22",
		"--etcd-count-metric-poll-period", "300ms", "-v", "2"}
	s := startEmbedded(t, bin, "", args...)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout, cfg.QPS, cfg.Burst = 2*time.Second, 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svcs := client.CoreV1().Services("default")
	var (
		next, answers atomic.Int32
		wg            sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	for range 8 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				i := next.Add(1)
				if _, err := svcs.Create(loadCtx, newService(fmt.Sprintf("w%04d", i)), metav1.CreateOptions{}); err == nil {
					answers.Add(1)
				}
				if i%3 == 0 { // a Service made a little earlier, by this client or another
					_ = svcs.Delete(loadCtx, fmt.Sprintf("w%04d", i-5), metav1.DeleteOptions{})
				}
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); answers.Load() < 150 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	took, err, exited := s.stop(t, 60*time.Second)
	if !exited || err != nil {
		t.Fatalf("SIGTERM under load: exited=%v err=%v\n%s", exited, err, tail(s.log.String(), 20))
	}
	stopLoad()
	wg.Wait()
	t.Logf("%d creates answered before and during the stop, which took %v", answers.Load(), took)

	s = startEmbedded(t, bin, s.dataDir, args...)
	if got := warmStarts(s.log.String()); got["services"] == "" || got["ipaddresses"] == "" {
		t.Fatalf("the restart did not start from its warm-start files: %v\n%s", got, tail(s.log.String(), 30))
	}
	etcd := embeddedEtcdClient(t, s)
	count := func(prefix string) string {
		resp, err := etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(resp.Count, 10)
	}
	layout := etcdlayout.Layout{Prefix: etcdlayout.DefaultPrefix}
	for _, c := range []struct{ metric, prefix string }{
		{`apiserver_resource_objects{group="",resource="services"}`, layout.ServicesPrefix()},
		{`apiserver_resource_objects{group="networking.k8s.io",resource="ipaddresses"}`, layout.IPAddressesPrefix()},
	} {
		var want, got string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			// etcd's count read each time: the restart's first repair pass
			// may still write.
			want = count(c.prefix)
			body, err := s.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			if err != nil {
				return false, err
			}
			got = ""
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, c.metric+" "); ok {
					got = v
				}
			}
			return got == want, nil
		})
		if err != nil {
			t.Errorf("%s is %q, etcd holds %s: the restart's cache is not etcd's", c.metric, got, want)
		}
	}
	report, err := invariants.Check(ctx, etcd, layout, model.IPAddress)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() {
		t.Errorf("after a warm start:\n%s", report)
	}
}
