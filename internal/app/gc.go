package app

import (
	"context"
	"runtime/debug"
)

// serveGCPercent is serve's GOGC when the environment sets none. The
// server's heap is mostly long-lived caches (the informers' Services and
// IPAddresses), and Go's default of 100 lets the heap grow to twice that
// before a collection: at a million Services, gigabytes of garbage held
// for nothing. 50 keeps the heap at one and a half times the live
// objects for more frequent collections (docs/performance.md has the
// figures: the memory saved and the CPU a create pays for it). GOGC in
// the environment, set or "off", wins.
const serveGCPercent = 50

// setServeGC applies serveGCPercent unless lookup (os.LookupEnv) finds GOGC
// set; it returns the percentage in force and whether it set it.
func setServeGC(lookup func(string) (string, bool)) (int, bool) {
	if _, set := lookup("GOGC"); set {
		percent := debug.SetGCPercent(-1) // read the environment's value back
		debug.SetGCPercent(percent)
		return percent, false
	}
	debug.SetGCPercent(serveGCPercent)
	return serveGCPercent, true
}

// releaseAfterStartup returns the start-up's garbage to the operating
// system once started is closed (the server's first repair pass: the
// informers hold every object by then). A start-up decodes every Service
// and IPAddress, some twice, and the heap it leaves behind is well above
// what the server holds afterwards; the runtime would give it back over
// minutes. One forced collection gives it back at once, when nothing waits
// for the server.
func releaseAfterStartup(ctx context.Context, started <-chan struct{}) {
	select {
	case <-started:
		debug.FreeOSMemory()
	case <-ctx.Done():
	}
}
