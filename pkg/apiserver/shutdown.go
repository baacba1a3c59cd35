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
// get -w open, SIGTERM took the whole 60 s shutdown timeout ("Failed to
// shutdown server: context deadline exceeded") instead of about 3 s, longer
// than a kubelet's 30 s grace period. Watch clients (kubectl, informers)
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
