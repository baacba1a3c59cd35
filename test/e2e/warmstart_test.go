package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	if got := warmStarts(s.log.String()); got["services"] != "31" || got["ipaddresses"] != "31" {
		t.Errorf("the restart started from %v objects of its warm-start files, want 31 of each", got)
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
