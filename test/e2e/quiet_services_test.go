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
	"github.com/allocator/allocator/internal/faultproxy"
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
	checkQuietServices(t, s.client, s.log.String, nil)
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
	}, nil)
}

// TestQuietServicesAreNotListedAcrossCuts is the gRPC variant on a
// three-member etcd reached through a fault proxy in front of each member
// (--etcd-servers names the three proxies), whose connections are all cut
// twice during the quiet seconds: the client then watches again on new
// streams, possibly to another member, and the progress requests must
// reach the streams the informers' watches share again, or the informer's
// store falls behind etcd's compactions and the repair lists the Services.
func TestQuietServicesAreNotListedAcrossCuts(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	cluster := etcdtest.NewCluster(t, 3)
	var proxies []*faultproxy.Proxy
	var urls endpointList
	for i := range cluster.Size() {
		p := cluster.Member(i).Proxy(t)
		proxies = append(proxies, p)
		urls = append(urls, p.URL())
	}
	kubeconfig, client := startServe(t, bin, urls, quietFlags...)
	logPath := filepath.Join(filepath.Dir(kubeconfig), "server.log")
	conns := func() (n int64) {
		for _, p := range proxies {
			n += p.Stats().Conns
		}
		return n
	}
	var beforeLastCut int64
	cut := func() {
		beforeLastCut = conns()
		for _, p := range proxies {
			p.Cut()
		}
	}
	checkQuietServices(t, client, func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}, cut, 2*time.Second, 5*time.Second)
	if after := conns(); after <= beforeLastCut {
		t.Errorf("the server opened no connection to etcd after the last cut (%d connections through the proxies before it, %d after)", beforeLastCut, after)
	}
}

// checkQuietServices creates a Service, then writes none for 8 s, and fails
// if the server listed the Services meanwhile or its log shows the repair's
// fallback to a list. At each of cutAt, counted from the quiet seconds'
// start, it calls cut.
func checkQuietServices(t *testing.T, client kubernetes.Interface, log func() string, cut func(), cutAt ...time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Services("default").Create(ctx, newService("quiet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := serviceLists(t, ctx, client)
	start := time.Now()
	for _, at := range cutAt {
		time.Sleep(time.Until(start.Add(at)))
		cut()
	}
	time.Sleep(time.Until(start.Add(8 * time.Second)))
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
