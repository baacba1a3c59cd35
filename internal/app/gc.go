package app

import (
	"context"
	"runtime/debug"
	"time"
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
// environment sets none. A start-up builds the whole live heap at once,
// and at 50 the collector marks it again each time it grows by half:
// about three times its final size marked in all, two fifths of a
// start-up's CPU at a million Services. At 200 it marks about half that,
// for a peak heap of up to three times the live objects while it lasts
// (docs/performance.md has the figures).
const startupGCPercent = 200

// startupGCWindow bounds the start-up's GOGC: a server whose first repair
// pass does not come (no ServiceCIDR yet, etcd away) collects at
// serveGCPercent after it.
const startupGCWindow = 5 * time.Minute

// setServeGC applies startupGCPercent unless lookup (os.LookupEnv) finds
// GOGC set; it returns the percentage in force and whether it set it
// (releaseAfterStartup then applies serveGCPercent).
func setServeGC(lookup func(string) (string, bool)) (int, bool) {
	if _, set := lookup("GOGC"); set {
		percent := debug.SetGCPercent(-1) // read the environment's value back
		debug.SetGCPercent(percent)
		return percent, false
	}
	debug.SetGCPercent(startupGCPercent)
	return startupGCPercent, true
}

// releaseAfterStartup ends the start-up's garbage collection once started
// is closed (the server's start-up over: bootstrap done and the first
// repair pass, the informers holding every object) or window has passed:
// when ours is true (setServeGC set the percentage) it applies
// serveGCPercent, and it returns the start-up's garbage to the operating
// system. A start-up decodes every Service and IPAddress, some twice, and
// the heap it leaves behind is well above what the server holds
// afterwards; the runtime would give it back over minutes. One forced
// collection gives it back at once, when readiness waits on nothing more:
// at a million Services it marks gigabytes, and made any earlier, it would
// run beside the bootstrap's last steps, which follow the first pass.
func releaseAfterStartup(ctx context.Context, started <-chan struct{}, ours bool, window time.Duration) {
	timer := time.NewTimer(window)
	defer timer.Stop()
	select {
	case <-started:
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	if ours {
		debug.SetGCPercent(serveGCPercent)
	}
	debug.FreeOSMemory()
}
