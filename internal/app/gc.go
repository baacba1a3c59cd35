package app

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"go.etcd.io/etcd/server/v3/storage/datadir"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/procstat"
)

// serveGCPercent is serve's GOGC after its start-up when the environment
// sets none: Go's default, at which the heap grows to twice the live
// objects before a collection. Collecting more often (50, one and a half
// times) saves a quarter of the heap but doubles the collector's CPU per
// byte allocated: at a million Services, where the live heap is gigabytes
// of small objects the collector marks slowly, that collector's CPU is most
// of what a create on a full server costs beyond one on an empty server
// (docs/performance.md has the memory and the CPU per create at both).
// GOGC in the environment, set or "off", wins.
const serveGCPercent = 100

// startupGCPercent is serve's GOGC until its start-up is over, when the
// environment sets no GOGC and no start-up heap applies (below). A
// start-up builds the whole live heap at once, and at 50 the collector
// marks it again each time it grows by half: about three times its final
// size marked in all, two fifths of a start-up's CPU at a million
// Services. At 200 it marks about half that, for a peak heap of up to
// three times the live objects while it lasts (docs/performance.md has the
// figures).
const startupGCPercent = 200

// A start-up heap: with the embedded etcd, when the environment sets
// neither GOGC nor GOMEMLIMIT, the start-up collects only when the heap
// reaches startupHeapPerDBByte times etcd's database file (at least
// startupHeapFloor, at most half the memory the process may use), as a
// soft memory limit with GOGC off. Once etcd serves, a start-up's garbage
// comes mostly while the live heap is still small (the first pages of the
// lists), where GOGC=200 collects every time it has allocated twice the
// little that is live; a heap of the size GOGC=200 reaches only at the
// end lets it collect a few times in all (docs/performance.md has the CPU
// and the peak at a million Services). The database's size tracks the
// objects the start-up reads, so a small server gets a small bound; the
// bound is soft, so a live heap near it costs collections, not an
// out-of-memory kill.
//
// The start-up heap applies only once the embedded etcd serves
// (applyAfterRestore); its restore runs at startupGCPercent. The restore
// decodes every stored revision into garbage while it builds an index it
// searches at random, and the warm-start files are decoded beside it
// (apiserver.LoadWarmStart): with no collection, each of those allocations
// takes fresh memory, the heap spreads over gigabytes, and each search of
// the index walks it through the TLB: at a million Services, twice the
// restore's CPU (docs/performance.md).
const (
	startupHeapPerDBByte = 3.5
	startupHeapFloor     = 256 << 20
)

// startupGCWindow bounds the start-up's collection settings: a server
// whose first repair pass does not come (no ServiceCIDR yet, etcd away)
// collects at serveGCPercent after it.
const startupGCWindow = 5 * time.Minute

// startupGC is how serve collects garbage until its start-up is over.
type startupGC struct {
	// ours: the environment sets no GOGC, so serve chose; the release
	// then applies serveGCPercent.
	ours bool
	// percent is GOGC during the start-up, -1 for off.
	percent int
	// limit is the start-up heap, a soft memory limit, when percent is -1
	// (ours, and only then: GOMEMLIMIT unset).
	limit int64
}

// planStartupGC chooses the start-up's collection. lookup is os.LookupEnv;
// dbBytes the embedded etcd's database file (0 with no embedded etcd, or
// none yet); memCap what the process may use (procstat.MemoryCap; 0 when
// unknown). GOGC in the environment is the runtime's already, and is
// kept; GOMEMLIMIT alone keeps its limit with startupGCPercent.
func planStartupGC(lookup func(string) (string, bool), dbBytes, memCap int64) startupGC {
	if _, set := lookup("GOGC"); set {
		percent := debug.SetGCPercent(-1) // read the environment's value back
		debug.SetGCPercent(percent)
		return startupGC{percent: percent}
	}
	_, limitSet := lookup("GOMEMLIMIT")
	if limitSet || dbBytes <= 0 || memCap <= 0 {
		return startupGC{ours: true, percent: startupGCPercent}
	}
	limit := max(int64(float64(dbBytes)*startupHeapPerDBByte), startupHeapFloor)
	return startupGC{ours: true, percent: -1, limit: min(limit, memCap/2)}
}

// embeddedDBBytes is the size of the embedded etcd's database file (bbolt's,
// where etcd's datadir package puts it), 0 with --etcd-servers or before
// the first start.
func embeddedDBBytes(opts *apiserver.Options) int64 {
	if len(opts.EtcdServers) > 0 {
		return 0
	}
	fi, err := os.Stat(datadir.ToBackendFileName(filepath.Join(opts.DataDir, embeddedEtcdDir)))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// memoryCap is procstat.MemoryCap, 0 when unknown.
func memoryCap() int64 {
	limit, err := procstat.MemoryCap()
	if err != nil {
		klog.V(2).InfoS("The memory this process may use is unknown; the start-up collects at its GOGC", "err", err)
		return 0
	}
	return limit
}

// apply puts the plan in force for the embedded etcd's restore: the
// start-up heap waits for applyAfterRestore.
func (g startupGC) apply() {
	if !g.ours {
		return
	}
	if g.limit > 0 {
		debug.SetGCPercent(startupGCPercent)
		return
	}
	debug.SetGCPercent(g.percent)
}

// applyAfterRestore puts the start-up heap in force, once the embedded
// etcd serves (or at once, with none).
func (g startupGC) applyAfterRestore() {
	if !g.ours || g.limit <= 0 {
		return
	}
	debug.SetMemoryLimit(g.limit)
	debug.SetGCPercent(g.percent)
}

// releaseAfterStartup ends the start-up's garbage collection once started
// is closed (the server's start-up over: bootstrap done and the first
// repair pass, the informers holding every object) or window has passed:
// when the plan is ours it applies serveGCPercent and lifts the start-up
// heap, and it returns the start-up's garbage to the operating system. A
// start-up decodes every Service and IPAddress, some twice, and the heap
// it leaves behind is well above what the server holds afterwards; the
// runtime would give it back over minutes. One forced collection gives it
// back at once, when readiness waits on nothing more: at a million
// Services it marks gigabytes, and made any earlier, it would run beside
// the bootstrap's last steps, which follow the first pass.
func releaseAfterStartup(ctx context.Context, started <-chan struct{}, g startupGC, window time.Duration) {
	timer := time.NewTimer(window)
	defer timer.Stop()
	select {
	case <-started:
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	if g.ours {
		debug.SetGCPercent(serveGCPercent)
		if g.limit > 0 {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}
	debug.FreeOSMemory()
}
