package e2e

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// startupGCLine is serve's -v=2 line naming the start-up's collection.
var startupGCLine = regexp.MustCompile(`"GOGC is not set; the server collects garbage at the defaults of serve" startupGCPercent=(-?\d+) startupHeap=(\d+)`)

// TestStartupGC: with GOGC and GOMEMLIMIT unset, a first start (no etcd
// database yet) collects at GOGC=200 during its start-up, a restart with
// GOGC off under a start-up heap sized by the database (here its floor,
// 256 MiB: a few megabytes of database); once the start-up is over both
// run at GOGC=100 with no memory limit, as the runtime's own metrics show.
func TestStartupGC(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	first := startEmbedded(t, bin, "", "-v", "2")
	percent, heap := startupGC(t, first.log.String)
	if percent != 200 || heap != 0 {
		t.Errorf("first start: GOGC %d, start-up heap %d during the start-up; want 200, none", percent, heap)
	}
	checkServeGC(t, first.client, first.log.String)
	if _, err, exited := first.stop(t, 30*time.Second); !exited || err != nil {
		t.Fatalf("stop: exited=%v err=%v", exited, err)
	}

	again := startEmbedded(t, bin, first.dataDir, "-v", "2")
	percent, heap = startupGC(t, again.log.String)
	if percent != -1 || heap < 256<<20 {
		t.Errorf("restart: GOGC %d, start-up heap %d during the start-up; want off, at least 256 MiB", percent, heap)
	}
	checkServeGC(t, again.client, again.log.String)
}

// startupGC reads the start-up's GOGC and heap from the log.
func startupGC(t *testing.T, log func() string) (int, int64) {
	t.Helper()
	m := startupGCLine.FindStringSubmatch(log())
	if m == nil {
		t.Fatalf("no start-up collection line in the log:\n%s", tail(log(), 30))
	}
	percent, _ := strconv.Atoi(m[1])
	heap, _ := strconv.ParseInt(m[2], 10, 64)
	return percent, heap
}

// checkServeGC waits for the start-up's end and then requires GOGC=100 and
// no memory limit in the runtime's metrics.
func checkServeGC(t *testing.T, client kubernetes.Interface, log func() string) {
	t.Helper()
	if !waitStartupOver(log, 30*time.Second) {
		t.Fatalf("no start-up over line in 30 s:\n%s", tail(log(), 30))
	}
	// The release waits on the same channel as the line: give it 10 s.
	var gogc, limit float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		gogc, limit = metricValue(t, string(body), "go_gc_gogc_percent"), metricValue(t, string(body), "go_gc_gomemlimit_bytes")
		if gogc == 100 && limit == math.MaxInt64 || time.Now().After(deadline) {
			break
		}
	}
	if gogc != 100 || limit != math.MaxInt64 {
		t.Errorf("after the start-up: GOGC %v, memory limit %v; want 100, none", gogc, limit)
	}
}

// startupOverLine is how serve logs the start-up's end.
const startupOverLine = `"Start-up over: bootstrap and the first repair pass done"`

// waitStartupOver waits up to limit for the start-up's end in log, and
// reports whether it came.
func waitStartupOver(log func() string, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		if strings.Contains(log(), startupOverLine) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// metricValue is the value of an unlabelled metric in a /metrics text.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}
