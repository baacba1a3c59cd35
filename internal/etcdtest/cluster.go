package etcdtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/embedetcd"
)

// clusterAttempts bounds how often NewCluster re-picks ports after a bind
// conflict (ports are picked before any member starts, so they can be lost).
const clusterAttempts = 3

// Cluster is a multi-member etcd cluster started for a test.
type Cluster struct {
	members []*Etcd
}

// NewCluster starts an n-member cluster on free 127.0.0.1 ports and stops it
// when the test ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: NewCluster(%d): need at least one member", n)
	}
	var lastErr error
	for attempt := 0; attempt < clusterAttempts; attempt++ {
		c, err := startCluster(t, n, attempt)
		if err == nil {
			return c
		}
		lastErr = err
		if !isAddrInUse(err) {
			break
		}
	}
	t.Fatalf("etcdtest: start %d-member cluster: %v", n, lastErr)
	return nil
}

func startCluster(t testing.TB, n, attempt int) (*Cluster, error) {
	dir := t.TempDir()
	token := fmt.Sprintf("etcdtest-%d", attempt)
	cfgs := make([]embedetcd.Config, n)
	peers := make([]string, n)
	for i := range cfgs {
		clientURL, err := embedetcd.LoopbackURL()
		if err != nil {
			return nil, err
		}
		peerURL, err := embedetcd.LoopbackURL()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("member-%d", i)
		cfgs[i] = embedetcd.Config{
			Name:                name,
			DataDir:             filepath.Join(dir, name),
			ClientURL:           clientURL,
			PeerURL:             peerURL,
			InitialClusterState: embedetcd.ClusterStateNew,
			InitialClusterToken: token,
			UnsafeNoFsync:       true,
		}
		peers[i] = name + "=" + peerURL
	}
	// Members wait for each other (quorum) before they are ready, so they
	// must start concurrently.
	members := make([]*Etcd, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(peers, ",")
		wg.Go(func() {
			members[i], errs[i] = start(t, cfgs[i])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Members that did start are stopped now rather than at cleanup, so
		// a retry does not compete with them.
		for _, m := range members {
			if m != nil {
				m.Stop()
			}
		}
		return nil, err
	}
	return &Cluster{members: members}, nil
}

// Member returns member i, to stop or restart it.
func (c *Cluster) Member(i int) *Etcd { return c.members[i] }

// Size returns the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Client returns the shared client of member i; it talks to that member only.
func (c *Cluster) Client(i int) *clientv3.Client { return c.members[i].Client() }

// NewClient returns an independent client for all members, closed when t ends.
func (c *Cluster) NewClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cl, err := newClient(c.Endpoints())
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Endpoints returns the client URLs of all members.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.Endpoints()...)
	}
	return eps
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
