package apiserver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
)

// lines collects log lines.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, prefix+" "+args)
}

// take returns the lines logged since the last take.
func (l *lines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.all
	l.all = nil
	return got
}

// TestEtcdReach: with a real etcd reached directly and through a proxy,
// a black-holed endpoint is logged once when it stops answering, again
// only after reachRemind, and once when it answers again; when no endpoint
// answers, one line says etcd is unreachable and since when, and one says
// when it answers again.
func TestEtcdReach(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	proxy := etcd.Proxy(t)
	endpoints := []string{proxy.URL(), etcd.Endpoints()[0]}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var logged lines
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newReach := func(endpoints ...string) *etcdReach {
		r := newEtcdReach(c, endpoints, funcr.New(logged.add, funcr.Options{}))
		r.now = func() time.Time { return now }
		return r
	}
	want := func(step string, subs ...string) {
		t.Helper()
		got := logged.take()
		if len(got) != len(subs) {
			t.Fatalf("%s: logged %q, want %d lines %q", step, got, len(subs), subs)
		}
		for i, sub := range subs {
			if !strings.Contains(got[i], sub) {
				t.Errorf("%s: line %q, want it to say %q", step, got[i], sub)
			}
		}
	}
	// recover clears the fault and rounds until the proxy answers again.
	recover := func(r *etcdReach) {
		t.Helper()
		proxy.Set(faultproxy.Fault{})
		proxy.Cut() // the black hole lasts until the connection is cut
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			now = now.Add(time.Second)
			r.round(ctx)
			r.mu.Lock()
			_, down := r.down[proxy.URL()]
			r.mu.Unlock()
			if !down {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the proxy did not answer again within 20 s")
			}
		}
	}

	r := newReach(endpoints...)
	r.round(ctx)
	want("all answer")

	proxy.Set(faultproxy.Fault{Drop: true})
	r.round(ctx)
	want("one black-holed", "etcd endpoint unreachable")
	now = now.Add(reachRemind / 2)
	r.round(ctx)
	want("still down, before the reminder")
	now = now.Add(reachRemind / 2)
	r.round(ctx)
	want("still down, at the reminder", "etcd endpoint still unreachable")
	recover(r)
	want("back", "etcd endpoint answers again")

	only := newReach(proxy.URL())
	only.round(ctx)
	proxy.Set(faultproxy.Fault{Drop: true})
	only.round(ctx)
	want("the only endpoint black-holed", "etcd endpoint unreachable", "etcd is unreachable: no endpoint answers")
	recover(only)
	want("the only endpoint back", "etcd endpoint answers again", "etcd answers again")
}
