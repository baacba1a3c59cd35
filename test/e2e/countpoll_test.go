package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestEtcdCountMetricPollPeriod: --etcd-count-metric-poll-period is
// kube-apiserver's. Each poll counts every key of each resource in etcd,
// about a second of CPU a minute at a million Services, so an operator
// there lengthens it or turns it off (0). A server counting every 300 ms
// shows its Services in apiserver_resource_objects, another with 0 never
// does. Each is a process of its own: the gauge is process-wide.
func TestEtcdCountMetricPollPeriod(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const services = `apiserver_resource_objects{group="",resource="services"}`
	metric := func(s *embeddedServer) (string, error) {
		body, err := s.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("/metrics: %w", err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, services+" ") {
				return strings.TrimPrefix(line, services+" "), nil
			}
		}
		return "", nil
	}
	counting := startEmbedded(t, bin, "", "--etcd-count-metric-poll-period=300ms")
	off := startEmbedded(t, bin, "", "--etcd-count-metric-poll-period=0")
	for _, s := range []*embeddedServer{counting, off} {
		if _, err := s.client.CoreV1().Services("default").Create(ctx, newService("counted"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// default/kubernetes and default/counted.
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		v, err := metric(counting)
		last = v
		return v == "2", err
	})
	if err != nil {
		t.Fatalf("with a 300 ms period: %s is %q, want 2: %v", services, last, err)
	}
	// The registry counts once as it starts, then every period: a server
	// that counted at all would show the series by now. Ten more of the
	// other's periods for good measure.
	time.Sleep(3 * time.Second)
	v, err := metric(off)
	if err != nil {
		t.Fatal(err)
	}
	if v != "" {
		t.Errorf("with the count off: %s is %s, want no such series", services, v)
	}
}
