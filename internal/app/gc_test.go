package app

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/apiserver"
)

// The runtime's percentage and memory limit are process-wide: these tests
// do not run in parallel, and each puts back what it found.

func keepGC(t *testing.T) {
	t.Helper()
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

const gib = int64(1) << 30

func TestPlanStartupGC(t *testing.T) {
	keepGC(t)
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for _, v := range vars {
				if v == k {
					return "x", true
				}
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		name            string
		lookup          func(string) (string, bool)
		dbBytes, memCap int64
		want            startupGC
	}{
		{"a million Services' database, 24 GiB", env(), 1661 << 20, 24 * gib, startupGC{ours: true, percent: -1, limit: 1661 << 20 * 7 / 2}},
		{"a small database: the floor", env(), 10 << 20, 24 * gib, startupGC{ours: true, percent: -1, limit: startupHeapFloor}},
		{"a first start, no database yet: the floor", env(), 0, 24 * gib, startupGC{ours: true, percent: startupGCPercent}},
		{"capped at half the memory", env(), 1661 << 20, 4 * gib, startupGC{ours: true, percent: -1, limit: 2 * gib}},
		{"the floor capped too", env(), 10 << 20, 256 << 20, startupGC{ours: true, percent: -1, limit: 128 << 20}},
		{"memory unknown", env(), 1661 << 20, 0, startupGC{ours: true, percent: startupGCPercent}},
		{"GOMEMLIMIT set: its limit, GOGC 200", env("GOMEMLIMIT"), 1661 << 20, 24 * gib, startupGC{ours: true, percent: startupGCPercent}},
	} {
		if got := planStartupGC(tc.lookup, tc.dbBytes, tc.memCap); got != tc.want {
			t.Errorf("%s: planStartupGC = %+v, want %+v", tc.name, got, tc.want)
		}
	}

	// GOGC in the environment is already the runtime's: it is kept.
	debug.SetGCPercent(300)
	if got := planStartupGC(env("GOGC", "GOMEMLIMIT"), 1661<<20, 24*gib); got != (startupGC{percent: 300}) {
		t.Errorf("GOGC=300: planStartupGC = %+v, want 300, not ours", got)
	}
	if got := debug.SetGCPercent(100); got != 300 {
		t.Errorf("GOGC=300: the runtime collects at %d", got)
	}
}

// apply puts a plan in force for etcd's restore, applyAfterRestore its
// start-up heap, and releaseAfterStartup puts serve's in force after the
// start-up, each only when the plan was serve's; the release changes
// nothing when the server stops first.
func TestStartupGCApplyAndRelease(t *testing.T) {
	keepGC(t)
	run := func(ctx context.Context, started <-chan struct{}, g startupGC, window time.Duration) <-chan struct{} {
		done := make(chan struct{})
		go func() { releaseAfterStartup(ctx, started, g, window); close(done) }()
		return done
	}
	wait := func(done <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("not returned %s", what)
		}
	}
	heap := startupGC{ours: true, percent: -1, limit: 3 * gib}
	percent := startupGC{ours: true, percent: startupGCPercent}
	env := startupGC{percent: 300}
	type gc struct {
		percent int
		limit   int64
	}
	for _, tc := range []struct {
		name                  string
		plan                  startupGC
		after                 func(started chan struct{}, cancel context.CancelFunc) time.Duration // returns the window
		restore, during, want gc
	}{
		{"start-up heap, start-up over", heap, func(started chan struct{}, _ context.CancelFunc) time.Duration {
			close(started)
			return time.Hour
		}, gc{startupGCPercent, math.MaxInt64}, gc{-1, 3 * gib}, gc{serveGCPercent, math.MaxInt64}},
		{"start-up heap, window passed", heap, func(chan struct{}, context.CancelFunc) time.Duration { return time.Millisecond },
			gc{startupGCPercent, math.MaxInt64}, gc{-1, 3 * gib}, gc{serveGCPercent, math.MaxInt64}},
		{"start-up heap, server stopped first", heap, func(_ chan struct{}, cancel context.CancelFunc) time.Duration {
			cancel()
			return time.Hour
		}, gc{startupGCPercent, math.MaxInt64}, gc{-1, 3 * gib}, gc{-1, 3 * gib}},
		{"start-up percentage, start-up over", percent, func(started chan struct{}, _ context.CancelFunc) time.Duration {
			close(started)
			return time.Hour
		}, gc{startupGCPercent, math.MaxInt64}, gc{startupGCPercent, math.MaxInt64}, gc{serveGCPercent, math.MaxInt64}},
		{"GOGC from the environment", env, func(started chan struct{}, _ context.CancelFunc) time.Duration {
			close(started)
			return time.Hour
		}, gc{300, math.MaxInt64}, gc{300, math.MaxInt64}, gc{300, math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(300) // as the environment would have it
			debug.SetMemoryLimit(math.MaxInt64)
			tc.plan.apply()
			check := func(when string, want gc) {
				t.Helper()
				limit := debug.SetMemoryLimit(-1)
				percent := debug.SetGCPercent(-1)
				debug.SetGCPercent(percent)
				if (gc{percent, limit}) != want {
					t.Errorf("%s: GOGC %d, memory limit %d; want %d, %d", when, percent, limit, want.percent, want.limit)
				}
			}
			check("during etcd's restore", tc.restore)
			tc.plan.applyAfterRestore()
			check("during the start-up", tc.during)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started := make(chan struct{})
			window := tc.after(started, cancel)
			wait(run(ctx, started, tc.plan, window), "after "+tc.name)
			check("after it", tc.want)
		})
	}
}

func TestEmbeddedDBBytes(t *testing.T) {
	dataDir := t.TempDir()
	opts := apiserver.NewOptions()
	opts.DataDir = dataDir
	if got := embeddedDBBytes(opts); got != 0 {
		t.Errorf("no database yet: %d bytes, want 0", got)
	}
	db := filepath.Join(dataDir, embeddedEtcdDir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, make([]byte, 12345), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := embeddedDBBytes(opts); got != 12345 {
		t.Errorf("embedded etcd's database: %d bytes, want 12345", got)
	}
	opts.EtcdServers = []string{"https://127.0.0.1:2379"}
	if got := embeddedDBBytes(opts); got != 0 {
		t.Errorf("--etcd-servers: %d bytes, want 0", got)
	}
}
