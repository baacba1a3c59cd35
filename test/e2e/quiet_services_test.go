package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestQuietServicesAreNotListed: while no Service is written for many of
// etcd's compactions (every second here; the restore marker moves etcd's
// revision on every second), the node-port repair's passes (every 500 ms)
// still read the Services from the server's informer, whose store etcd's
// progress notifications keep at a revision etcd has not compacted, and
// never list them through the API. A server process of its own: the
// request metrics are the process's.
func TestQuietServicesAreNotListed(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--etcd-compaction-interval=1s", "--repair-interval=500ms")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.client.CoreV1().Services("default").Create(ctx, newService("quiet"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := serviceLists(t, ctx, s)
	time.Sleep(8 * time.Second)
	if after := serviceLists(t, ctx, s); after != before {
		t.Errorf("the Services were listed through the API %d times in 8 s without a Service write, want none", after-before)
	}
	if strings.Contains(s.log.String(), "did not catch up") {
		t.Errorf("the repair fell back to a list of the Services:\n%s", tail(s.log.String(), 20))
	}
}

// serviceLists is how many LISTs of Services the server answered.
func serviceLists(t *testing.T, ctx context.Context, s *embeddedServer) int {
	t.Helper()
	body, err := s.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
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
