package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
)

// quietFlags compact etcd every second (the restore marker moves etcd's
// revision on every second) and run the node-port repair every 500 ms.
var quietFlags = []string{"--etcd-compaction-interval=1s", "--repair-interval=500ms"}

// TestQuietServicesAreNotListed: while no Service is written for many of
// etcd's compactions, the node-port repair's passes still read the
// Services from the server's informer, whose store etcd's progress
// notifications keep at a revision etcd has not compacted, and never list
// them through the API. A server process of its own: the request metrics
// are the process's.
func TestQuietServicesAreNotListed(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", quietFlags...)
	checkQuietServices(t, s.client, s.log.String)
}

// TestQuietServicesAreNotListedOverGRPC is TestQuietServicesAreNotListed
// for a server on an etcd of its own (--etcd-servers): the progress
// requests then travel over gRPC, and etcd answers a request only on the
// watch stream it came on, which must be the one the informers' watches
// share.
func TestQuietServicesAreNotListedOverGRPC(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	kubeconfig, client := startServe(t, bin, etcd, quietFlags...)
	logPath := filepath.Join(filepath.Dir(kubeconfig), "server.log")
	checkQuietServices(t, client, func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	})
}

// checkQuietServices creates a Service, then writes none for 8 s, and fails
// if the server listed the Services meanwhile or its log shows the repair's
// fallback to a list.
func checkQuietServices(t *testing.T, client kubernetes.Interface, log func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Services("default").Create(ctx, newService("quiet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := serviceLists(t, ctx, client)
	time.Sleep(8 * time.Second)
	if after := serviceLists(t, ctx, client); after != before {
		t.Errorf("the Services were listed through the API %d times in 8 s without a Service write, want none", after-before)
	}
	if text := log(); strings.Contains(text, "did not catch up") {
		t.Errorf("the repair fell back to a list of the Services:\n%s", tail(text, 20))
	}
}

// serviceLists is how many LISTs of Services the server answered.
func serviceLists(t *testing.T, ctx context.Context, client kubernetes.Interface) int {
	t.Helper()
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="services"`) || !strings.Contains(line, `verb="LIST"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
