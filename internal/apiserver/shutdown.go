package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// watchTerminator ends every watch request when the server starts shutting
// down.
//
// k8s.io/apiserver's graceful shutdown lets net/http's Shutdown wait for
// every open connection, and a watch never ends by itself: with one kubectl
// get -w open, SIGTERM would take the whole 60 s shutdown timeout ("Failed
// to shutdown server: context deadline exceeded") instead of about 3 s,
// longer than a kubelet's 30 s grace period. Watch clients (kubectl, informers)
// re-establish a watch that ends, against another replica or this server
// after its restart, so ending them is what kube-apiserver's clients expect.
type watchTerminator struct {
	stopping chan struct{}
	once     sync.Once
}

func newWatchTerminator() *watchTerminator {
	return &watchTerminator{stopping: make(chan struct{})}
}

// stop ends the open watches and every watch started from now on.
func (w *watchTerminator) stop() { w.once.Do(func() { close(w.stopping) }) }

// wrap returns next with the context of every watch request cancelled on stop.
func (w *watchTerminator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !isWatch(r) {
			next.ServeHTTP(rw, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-w.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		next.ServeHTTP(rw, r.WithContext(ctx))
	})
}

// isWatch reports whether r is a watch: ?watch=true (what clients send) or
// the legacy /watch/ path.
func isWatch(r *http.Request) bool {
	if v := r.URL.Query().Get("watch"); v != "" {
		if b, err := strconv.ParseBool(v); err == nil && b {
			return true
		}
	}
	return strings.Contains(r.URL.Path, "/watch/")
}

// controllerGroup runs the server's controllers that write through its own
// API (the ServiceCIDR controller, the repairs, the default ServiceCIDR's
// keeper), so that shutdown stops them and waits for their last request
// before the server stops serving. A request the stop cuts off is logged
// at error level by the generic server's timeout filter ("Handler
// timeout"), and its write's outcome is left unknown to the controller.
type controllerGroup struct {
	mu      sync.Mutex
	stopped bool           // guarded by mu
	cancels []func()       // of the running controllers; guarded by mu
	wg      sync.WaitGroup // Add under mu while not stopped
}

// run runs f on a context that ends with ctx or at stop, unless the group
// is stopped already.
func (g *controllerGroup) run(ctx context.Context, f func(context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		cancel()
		return
	}
	g.cancels = append(g.cancels, cancel)
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		defer cancel()
		f(ctx)
	}()
}

// stop cancels every controller and waits until they have returned or ctx
// ends, whichever is first.
func (g *controllerGroup) stop(ctx context.Context) error {
	g.mu.Lock()
	g.stopped = true
	for _, cancel := range g.cancels {
		cancel()
	}
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
