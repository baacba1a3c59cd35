package apiserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
)

// controllerCutoff is how long a controller's request may go on after its
// caller's context was cancelled (controllerClient).
const controllerCutoff = controllerStopTimeout

// controllerClient is loopbackClient for the controllers that run in the
// server (controllerGroup). A request it has sent runs to its end
// when the controller's context is cancelled meanwhile, for controllerCutoff
// at most: shutdown cancels the controllers' contexts so that they start
// nothing new, and a request cut off half-way is logged by the server at
// error level ("Handler timeout") and leaves the controller not knowing
// whether its write was applied. A request not sent yet when the context
// ends is not sent, and one whose context's deadline passes ends then. It is
// for requests only: an informer's watch must end with its context.
func controllerClient(loopback *restclient.Config) (kubernetes.Interface, error) {
	return newLoopbackClient(loopback, func(rt http.RoundTripper) http.RoundTripper {
		return seenThrough{next: rt, cutoff: controllerCutoff}
	})
}

// seenThrough sends each request on a context detached from its caller's
// cancellation, ended cutoff after it (see controllerClient).
type seenThrough struct {
	next   http.RoundTripper
	cutoff time.Duration
}

func (s seenThrough) RoundTrip(req *http.Request) (*http.Response, error) {
	caller := req.Context()
	if err := caller.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(caller))
	stop := context.AfterFunc(caller, func() {
		if errors.Is(caller.Err(), context.DeadlineExceeded) {
			cancel()
			return
		}
		time.AfterFunc(s.cutoff, cancel)
	})
	release := func() {
		stop()
		cancel()
	}
	resp, err := s.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		release()
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: release}
	return resp, nil
}

// cancelOnClose is a response body that ends its request's context when
// it is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
