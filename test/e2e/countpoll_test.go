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
// kube-apiserver's. Each poll counts the objects of each resource: the
// Services and IPAddresses in the server's informers, which hold them all,
// every other resource's keys in etcd. A server counting every 300 ms shows
// its Services in apiserver_resource_objects, and asks etcd to count
// neither Services nor IPAddresses once its informers have synced; another
// with 0 never shows the series. Each is a process of its own: the gauge
// is process-wide.
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
	etcdCounts := func() string {
		body, err := counting.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		var counts []string
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "etcd_requests_total{") && strings.Contains(line, `operation="listWithCount"`) &&
				(strings.Contains(line, `resource="services"`) || strings.Contains(line, `resource="ipaddresses"`)) {
				counts = append(counts, line)
			}
		}
		return strings.Join(counts, "\n")
	}
	before := etcdCounts()
	// The registry counts once as it starts, then every period: a server
	// that counted at all would show the series by now. Ten more of the
	// other's periods for good measure.
	time.Sleep(3 * time.Second)
	if after := etcdCounts(); after != before {
		t.Errorf("etcd counted the Services or IPAddresses for the metric, their informers synced:\nbefore\n%s\nafter\n%s", before, after)
	}
	if _, err := counting.client.CoreV1().Services("default").Create(ctx, newService("counted-too"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		v, err := metric(counting)
		last = v
		return v == "3", err
	})
	if err != nil {
		t.Errorf("a third Service: %s is %q, want 3: %v", services, last, err)
	}
	v, err := metric(off)
	if err != nil {
		t.Fatal(err)
	}
	if v != "" {
		t.Errorf("with the count off: %s is %s, want no such series", services, v)
	}
}
