package etcdtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/client/v3"
)

func get(ctx context.Context, t *testing.T, c *clientv3.Client, key string) string {
	t.Helper()
	resp, err := c.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %d kvs, want 1", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func TestPutGet(t *testing.T) {
	t.Parallel()
	e := New(t)
	for _, ep := range e.Endpoints() {
		u, err := url.Parse(ep)
		if err != nil || u.Hostname() != "127.0.0.1" {
			t.Fatalf("endpoint %q is not on 127.0.0.1 (%v)", ep, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Client().Put(ctx, "/a", "1"); err != nil {
		t.Fatal(err)
	}
	if first, second := e.Client(), e.Client(); first != second {
		t.Error("Client() is not shared")
	}
	other := e.NewClient(t)
	if other == e.Client() {
		t.Error("NewClient returned the shared client")
	}
	if got := get(ctx, t, other, "/a"); got != "1" {
		t.Errorf("got %q, want 1", got)
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	e := New(t)
	c := e.Client()
	before := e.Endpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/survives", "yes"); err != nil {
		t.Fatal(err)
	}

	e.Stop()
	e.Stop() // idempotent
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err := c.Get(short, "/survives")
	cancelShort()
	if err == nil {
		t.Fatal("Get on a stopped etcd succeeded")
	}

	e.Restart(t)
	if diff := cmp.Diff(before, e.Endpoints()); diff != "" {
		t.Errorf("endpoints changed on restart (-before +after):\n%s", diff)
	}
	// The client created before the stop works again; data survived.
	if got := get(ctx, t, c, "/survives"); got != "yes" {
		t.Errorf("got %q after restart, want yes", got)
	}
	if _, err := c.Put(ctx, "/after", "1"); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := NewCluster(t, 3)
	if got := len(c.Endpoints()); got != 3 {
		t.Fatalf("%d endpoints, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client(0).Put(ctx, "/k", "from-0"); err != nil {
		t.Fatal(err)
	}
	// Get is linearizable by default: member 2 answers with the write.
	if got := get(ctx, t, c.Client(2), "/k"); got != "from-0" {
		t.Errorf("member 2 read %q, want from-0", got)
	}
	resp, err := c.Client(1).MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Members) != 3 {
		t.Errorf("member list has %d members, want 3", len(resp.Members))
	}
	if got := get(ctx, t, c.NewClient(t), "/k"); got != "from-0" {
		t.Errorf("cluster client read %q, want from-0", got)
	}
}

func TestClusterMemberRestart(t *testing.T) {
	t.Parallel()
	c := NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Member(1).Stop()
	// Two of three members still have quorum.
	if _, err := c.Client(0).Put(ctx, "/while-down", "x"); err != nil {
		t.Fatal(err)
	}
	c.Member(1).Restart(t)
	// Member 1 catches up from the leader; its old client reconnects.
	if got := get(ctx, t, c.Client(1), "/while-down"); got != "x" {
		t.Errorf("member 1 read %q after restart, want x", got)
	}
}
