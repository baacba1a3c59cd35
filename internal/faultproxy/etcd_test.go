package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
)

// TestEtcdWriteLandsLate shows the failure the proxy exists for: a Put whose
// caller gave up still lands in etcd afterwards.
func TestEtcdWriteLandsLate(t *testing.T) {
	t.Parallel()
	const delay = 1500 * time.Millisecond
	e := etcdtest.New(t)
	tests := []struct {
		name  string
		fault faultproxy.Fault
		key   string
		// The caller gives up after 300ms: by its deadline, or else by
		// cancelling.
		deadline bool
		// lands: the write must land, no sooner than the delay after the
		// Put; otherwise it may or may not.
		lands bool
	}{
		{
			name:     "deadline, direction delayed",
			fault:    faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget},
			key:      "/late/x",
			deadline: true,
			lands:    true,
		},
		{
			name:  "cancel, key delayed",
			fault: faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget, Match: [][]byte{[]byte("/fault/")}},
			key:   "/fault/x",
			lands: true,
		},
		{
			// gRPC sends the deadline along (grpc-timeout) and etcd counts
			// it from the arrival of the request's HEADERS frame, which
			// holds no key. gRPC sometimes writes it apart from the DATA
			// frame; then it passes at once, the deadline runs out in etcd
			// before the delayed DATA arrives and the write does not land.
			name:     "deadline, key delayed",
			fault:    faultproxy.Fault{Delay: delay, Direction: faultproxy.ToTarget, Match: [][]byte{[]byte("/fault/")}},
			key:      "/fault/y",
			deadline: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, client := e.Proxied(t)
			if _, err := client.Put(ctx, "/ok", "1"); err != nil {
				t.Fatalf("put through the proxy: %v", err)
			}
			if p.Stats().Conns == 0 {
				t.Fatal("the put did not go through the proxy")
			}

			p.Set(tt.fault)
			start := time.Now()
			var (
				short   context.Context
				giveUp  context.CancelFunc
				wantErr error
			)
			if tt.deadline {
				short, giveUp = context.WithTimeout(ctx, 300*time.Millisecond)
				wantErr = context.DeadlineExceeded
			} else {
				short, giveUp = context.WithCancel(ctx)
				time.AfterFunc(300*time.Millisecond, giveUp)
				wantErr = context.Canceled
			}
			_, err := client.Put(short, tt.key, "late")
			giveUp()
			if !errors.Is(err, wantErr) && status.Code(err) != status.FromContextError(wantErr).Code() {
				t.Fatalf("delayed put: %v, want %v", err, wantErr)
			}
			if p.Stats().Delayed == 0 {
				t.Error("no chunk counted as delayed")
			}
			if !tt.lands {
				return
			}

			waitUntil(t, tt.key+" in etcd", func() bool {
				resp, err := e.Client().Get(ctx, tt.key)
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				return len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "late"
			})
			if got := time.Since(start); got < delay {
				t.Errorf("%s landed %v after the put, before the %v delay", tt.key, got, delay)
			}
		})
	}
}

// waitUntil polls cond until it holds, for at most 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
