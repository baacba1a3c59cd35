package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestKubectlListOutlivesCompaction: kubectl pages the Services of a
// namespace one per request (client-go's five requests a second: about 5 s)
// from one replica, while the other creates and deletes Services and both
// compact etcd every second. The list completes, every page at its first
// page's revision, which the replica holds in etcd. Killed, the replica's
// hold ends with its lease, and the compaction goes on past the revision.
func TestKubectlListOutlivesCompaction(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	f := newFleet(t, bin, etcd, 2, "--service-cluster-ip-range", "10.0.0.0/24", "--etcd-compaction-interval", "1s")
	f.startAll("ipaddress")
	lister, writer := f.replicas[0].serving.Load(), f.replicas[1].serving.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var want []string
	if _, err := writer.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "listed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		svc := newService(fmt.Sprintf("listed-%02d", i))
		if _, err := writer.client.CoreV1().Services("listed").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "service/"+svc.Name)
	}
	stopChurn := testserver.Churn(t, ctx, writer.client, "default")
	defer stopChurn()

	start := time.Now()
	stdout, stderr, code := kubectl(t, lister.kubeconfig, "get", "services", "-n", "listed", "--chunk-size=1", "-o", "name")
	if code != 0 {
		t.Fatalf("kubectl get services --chunk-size=1: exit %d after %v\n%s", code, time.Since(start), stderr)
	}
	got := strings.Fields(stdout)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("kubectl listed %v, want %v", got, want)
	}
	t.Logf("kubectl paged 25 Services in %v, etcd compacted every second", time.Since(start))

	holds := etcdlayout.Layout{Prefix: etcdlayout.DefaultPrefix}.ListHoldsPrefix()
	held := heldRevisions(t, ctx, etcd.Client(), holds)
	if len(held) != 1 {
		t.Fatalf("holds in etcd after the list: %v, want the lister's one", held)
	}
	f.replicas[0].mu.Lock()
	p := f.replicas[0].proc
	f.replicas[0].mu.Unlock()
	_ = p.stop(syscall.SIGKILL, 30*time.Second)
	f.replicas[0].serving.Store(nil)

	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		return len(heldRevisions(t, ctx, etcd.Client(), holds)) == 0, nil
	})
	if err != nil {
		t.Fatalf("the killed replica's hold still in etcd 45 s later: %v", heldRevisions(t, ctx, etcd.Client(), holds))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := etcd.Client().Get(ctx, "/registry/services/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(held[0]))
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			return true, nil
		case err != nil:
			return false, err
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("revision %d, no longer held, not compacted 30 s later: %v", held[0], err)
	}
}

// heldRevisions are the revisions the list holds in etcd name.
func heldRevisions(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string) []int64 {
	t.Helper()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read the list holds: %v", err)
	}
	var revs []int64
	for _, kv := range resp.Kvs {
		rev, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			t.Fatalf("list hold %s: %q is no revision", kv.Key, kv.Value)
		}
		revs = append(revs, rev)
	}
	return revs
}
