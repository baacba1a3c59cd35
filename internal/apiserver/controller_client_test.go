package apiserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSeenThrough: a controller's request that was sent runs to its end
// when the controller's context is cancelled (the server answers, the
// caller gets the answer), up to the cutoff; one not sent yet is not sent;
// one whose deadline passes ends at the deadline.
func TestSeenThrough(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// end ends the caller's context once the server holds the request
		// (nil: cancelled before the request is sent).
		end      func(cancel context.CancelFunc)
		deadline time.Duration // of the caller's context; 0: none
		cutoff   time.Duration
		answered bool // the server's answer reaches the caller
		sent     bool
	}{
		{name: "cancelled in flight", end: func(cancel context.CancelFunc) { cancel() }, cutoff: time.Minute, answered: true, sent: true},
		{name: "cancelled in flight past the cutoff", end: func(cancel context.CancelFunc) { cancel() }, cutoff: 50 * time.Millisecond, sent: true},
		{name: "cancelled before sending", cutoff: time.Minute},
		// The deadline leaves the request time to reach the server on a
		// loaded machine.
		{name: "deadline passes in flight", end: func(context.CancelFunc) {}, deadline: 2 * time.Second, cutoff: time.Minute, sent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			held := make(chan struct{})      // the server holds the request
			release := make(chan struct{})   // the server may answer
			serverSaw := make(chan error, 1) // the request's context at the server, when it ended or answered
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(held)
				select {
				case <-release:
					serverSaw <- r.Context().Err()
					_, _ = io.WriteString(w, "done")
				case <-r.Context().Done():
					serverSaw <- r.Context().Err()
				}
			}))
			defer srv.Close()
			client := &http.Client{Transport: seenThrough{next: http.DefaultTransport, cutoff: tt.cutoff}}

			ctx, cancel := context.WithCancel(context.Background())
			if tt.deadline > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tt.deadline)
			}
			defer cancel()
			if tt.end == nil {
				cancel()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				body string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := client.Do(req)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				done <- result{body: string(b), err: err}
			}()
			if !tt.sent {
				if r := <-done; r.err == nil {
					t.Fatalf("a request whose context ended before it was sent got %q", r.body)
				}
				select {
				case <-held:
					t.Fatal("a request whose context ended before it was sent reached the server")
				default:
				}
				return
			}
			select {
			case <-held:
			case r := <-done:
				t.Fatalf("the request ended (%q, %v) before the server held it", r.body, r.err)
			case <-time.After(30 * time.Second):
				t.Fatal("the server never received the request")
			}
			tt.end(cancel)
			if tt.answered {
				time.Sleep(100 * time.Millisecond) // the cancellation has had its chance to cut the request
				close(release)
				if err := <-serverSaw; err != nil {
					t.Fatalf("the server saw the request's context end (%v) before it answered", err)
				}
				if r := <-done; r.err != nil || r.body != "done" {
					t.Fatalf("caller got %q, %v; want the server's answer", r.body, r.err)
				}
				return
			}
			select {
			case err := <-serverSaw:
				if err == nil {
					t.Fatal("the server answered; want the request ended")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the request still runs 10 s after its cutoff or deadline")
			}
			if r := <-done; !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("caller got %q, %v; want the request's context error", r.body, r.err)
			}
			close(release)
		})
	}
}
