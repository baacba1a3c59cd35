package transition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// DefaultTTL is the default lease TTL of a replica record.
const DefaultTTL = 15 * time.Second

// Config configures Join.
type Config struct {
	// Client is the replica's etcd client.
	Client *clientv3.Client
	// Prefix is the etcd prefix ("/registry").
	Prefix string
	// Model is model.Bitmap or model.IPAddress.
	Model model.Name
	// ID names the replica; default host-pid-random.
	ID string
	// TTL is the lease TTL of the record (default DefaultTTL, at least 2 s).
	TTL time.Duration
	// Version is stored in the record for operators.
	Version string
	// OnChange, if set, is called after the replica applied a new state
	// (without any lock held).
	OnChange func(State)
}

// Coordinator is one replica's membership in the transition protocol (see
// the package doc). Allocations bracket their work with Begin.
type Coordinator struct {
	cfg    Config
	layout etcdlayout.Layout
	logger klog.Logger

	// gate is held shared by every allocation from Begin to done, and
	// exclusively while the replica switches mode, so an acknowledgement
	// written after a switch covers every allocation begun before it.
	gate sync.RWMutex

	regMu     sync.Mutex // serialises (re-)registration
	refreshMu sync.Mutex // one re-registration at a time from Begin

	mu    sync.Mutex
	state State // guarded by mu
	// readAt is the revision of the last registration's read of the
	// state: the first watch starts after it, not after the state's own
	// revision, from which etcd would replay every write since that is
	// still in its history (all of a start-up's, on a long-lived data dir).
	readAt     int64 // guarded by mu
	leaseID    clientv3.LeaseID
	freshUntil time.Time // the lease is surely alive until then
	started    time.Time
	retired    bool
	closed     bool
	cancel     context.CancelFunc
	done       chan struct{}
}

// Join registers the replica, reads (or creates) the cluster's state and
// starts keeping both current until ctx ends or Close is called. A
// bitmap-model replica is refused with ErrRetired when dual write is off.
func Join(ctx context.Context, cfg Config) (*Coordinator, error) {
	if cfg.Client == nil {
		return nil, errors.New("transition: an etcd client is required")
	}
	if cfg.Model != model.Bitmap && cfg.Model != model.IPAddress {
		return nil, fmt.Errorf("transition: unknown model %q", cfg.Model)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 2*time.Second {
		cfg.TTL = 2 * time.Second
	}
	if cfg.ID == "" {
		cfg.ID = defaultID()
	}
	c := &Coordinator{
		cfg:     cfg,
		layout:  etcdlayout.Layout{Prefix: cfg.Prefix},
		logger:  klog.FromContext(ctx).WithValues("replica", cfg.ID, "model", cfg.Model),
		started: time.Now().UTC(),
		done:    make(chan struct{}),
	}
	if err := c.register(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	go func() {
		defer close(c.done)
		select {
		case <-ctx.Done():
			cancel()
		case <-runCtx.Done():
		}
	}()
	go c.watch(runCtx)
	return c, nil
}

func defaultID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// ID returns the replica's id.
func (c *Coordinator) ID() string { return c.cfg.ID }

// State returns the state the replica acts on.
func (c *Coordinator) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// DualWrite reports whether the replica dual-writes now.
func (c *Coordinator) DualWrite() bool { return c.State().DualWrite }

// register grants a lease, writes the record, reads or creates the state,
// applies it and writes the record again with the acknowledgement. The
// record is written before the state is read (see the package doc).
func (c *Coordinator) register(ctx context.Context) error {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	client := c.cfg.Client
	lease, err := client.Grant(ctx, int64(c.cfg.TTL/time.Second))
	if err != nil {
		return fmt.Errorf("transition: grant lease: %w", err)
	}
	granted := time.Now()
	cleanup := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = client.Revoke(rctx, lease.ID)
	}
	rec := c.record(State{})
	if err := c.putRecord(ctx, lease.ID, rec); err != nil {
		cleanup()
		return err
	}
	initial := State{Changed: time.Now().UTC(), By: "replica " + c.cfg.ID}
	if c.cfg.Model == model.Bitmap {
		initial.DualWrite, initial.Reason = true, "a bitmap-model replica started"
	} else {
		exists, err := clusterip.IPMapExists(ctx, client, c.layout)
		if err != nil {
			cleanup()
			return err
		}
		initial.DualWrite = exists
		initial.Reason = "an IPAddress-model replica started on a cluster without a bitmap"
		if exists {
			initial.Reason = "an IPAddress-model replica started on a cluster with a bitmap"
		}
	}
	state, readAt, err := ensureState(ctx, client, c.cfg.Prefix, initial)
	if err != nil {
		cleanup()
		return err
	}
	if c.cfg.Model == model.Bitmap && !state.DualWrite {
		cleanup()
		return ErrRetired
	}
	c.gate.Lock()
	c.mu.Lock()
	oldLease := c.leaseID
	if state.Revision > c.state.Revision {
		c.state = state
	}
	state = c.state
	c.readAt = max(c.readAt, readAt)
	c.leaseID = lease.ID
	c.freshUntil = granted.Add(c.cfg.TTL * 2 / 3)
	c.retired = false
	c.mu.Unlock()
	c.gate.Unlock()
	if err := c.putRecord(ctx, lease.ID, c.record(state)); err != nil {
		cleanup()
		return err
	}
	ka, err := client.KeepAlive(context.WithoutCancel(ctx), lease.ID)
	if err != nil {
		cleanup()
		return fmt.Errorf("transition: keep lease alive: %w", err)
	}
	go c.consumeKeepAlive(lease.ID, ka)
	if oldLease != 0 && oldLease != lease.ID {
		// The record now hangs on the new lease; stop renewing the old one.
		_, _ = client.Revoke(ctx, oldLease)
	}
	c.logger.V(2).Info("Joined the ClusterIP allocator transition", "state", state.String(), "ttl", c.cfg.TTL)
	return nil
}

func (c *Coordinator) record(state State) Record {
	host, _ := os.Hostname()
	return Record{
		ID: c.cfg.ID, Model: c.cfg.Model, DualWrite: state.DualWrite, StateRevision: state.Revision,
		Host: host, PID: os.Getpid(), Version: c.cfg.Version, Started: c.started,
	}
}

func (c *Coordinator) putRecord(ctx context.Context, lease clientv3.LeaseID, rec Record) error {
	value, err := rec.encode()
	if err != nil {
		return fmt.Errorf("transition: %w", err)
	}
	key := c.layout.AllocatorReplicasPrefix(string(c.cfg.Model)) + c.cfg.ID
	if _, err := c.cfg.Client.Put(ctx, key, string(value), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("transition: write replica record %s: %w", key, err)
	}
	return nil
}

// consumeKeepAlive extends freshUntil with every keep-alive answer of lease;
// when the channel closes (lease lost, client closed) the replica is stale
// until it registers again.
func (c *Coordinator) consumeKeepAlive(lease clientv3.LeaseID, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	for resp := range ch {
		if resp == nil {
			break
		}
		c.mu.Lock()
		if c.leaseID == lease {
			// The server renewed the lease for resp.TTL seconds at most
			// a round trip ago; keep a third of the TTL as margin.
			until := time.Now().Add(time.Duration(resp.TTL)*time.Second - c.cfg.TTL/3)
			if until.After(c.freshUntil) {
				c.freshUntil = until
			}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	if c.leaseID == lease {
		c.freshUntil = time.Time{}
	}
	c.mu.Unlock()
}

// Begin is called by every allocation before it decides anything: it makes
// sure the replica's lease is fresh (registering again if it was lost, e.g.
// after the process was frozen), then holds the gate shared until done is
// called. dual says whether to write the bitmap as well.
func (c *Coordinator) Begin(ctx context.Context) (dual bool, done func(), err error) {
	c.mu.Lock()
	stale := time.Now().After(c.freshUntil)
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return false, nil, errors.New("transition: coordinator closed")
	}
	if stale {
		if err := c.refresh(ctx); err != nil {
			if errors.Is(err, ErrRetired) {
				c.mu.Lock()
				c.retired = true
				c.mu.Unlock()
			}
			return false, nil, err
		}
	}
	c.gate.RLock()
	c.mu.Lock()
	dual, retired := c.state.DualWrite, c.retired
	c.mu.Unlock()
	if retired {
		c.gate.RUnlock()
		return false, nil, ErrRetired
	}
	return dual, c.gate.RUnlock, nil
}

// refresh registers again unless another caller did meanwhile.
func (c *Coordinator) refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.Lock()
	stale := time.Now().After(c.freshUntil)
	c.mu.Unlock()
	if !stale {
		return nil
	}
	c.logger.Info("Replica record lease is stale; registering again before allocating")
	return c.register(ctx)
}

// watch applies every change of the state key until ctx ends. It watches
// from the revision after the registration's read of the state; after a
// watch ends (etcd compacted that revision away, the leader was lost) it
// reads the key again and watches from the revision after that read. Never
// from the state's own revision: a state written long ago is older than
// any compaction, and a watch from it would fail again at once, or, if
// etcd still has that history, make etcd read every write since.
func (c *Coordinator) watch(ctx context.Context) {
	key := c.layout.AllocatorState()
	c.mu.Lock()
	from := max(c.state.Revision, c.readAt) + 1
	c.mu.Unlock()
	for ctx.Err() == nil {
		wch := c.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRev(from))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				c.logger.V(2).Info("Transition state watch ended; reading again", "err", err)
				break
			}
			for _, ev := range resp.Events {
				// Past what was received, not the response's header: a
				// watch catching up may be sent its events in several
				// responses, each with etcd's current revision.
				from = max(from, ev.Kv.ModRevision+1)
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				state, err := decodeState(ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					c.logger.Error(err, "Ignoring an unreadable transition state")
					continue
				}
				c.apply(ctx, state)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Resynchronise from a fresh read (compaction, lost leader).
		state, ok, at, err := readStateAt(ctx, c.cfg.Client, c.cfg.Prefix)
		if err == nil {
			if ok {
				c.apply(ctx, state)
			}
			from = max(from, at+1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// apply switches the replica to state, waiting for allocations in flight,
// and acknowledges it in the record.
func (c *Coordinator) apply(ctx context.Context, state State) {
	c.mu.Lock()
	if state.Revision <= c.state.Revision {
		c.mu.Unlock()
		return
	}
	lease := c.leaseID
	c.mu.Unlock()

	c.gate.Lock() // waits for every allocation begun under the old state
	c.mu.Lock()
	old := c.state
	c.state = state
	if c.cfg.Model == model.Bitmap && !state.DualWrite {
		// Only a replica whose lease had lapsed can see this (Finish
		// refuses while bitmap records live): stop allocating.
		c.retired = true
	}
	c.mu.Unlock()
	c.gate.Unlock()

	if err := c.putRecord(ctx, lease, c.record(state)); err != nil {
		c.logger.Error(err, "Acknowledging the transition state failed; retried at the next change or re-registration")
	}
	if old.DualWrite != state.DualWrite {
		c.logger.Info("ClusterIP allocator transition state changed", "state", state.String())
	}
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(state)
	}
}

// Close stops the coordinator and deletes the replica's record (revoking
// its lease). Allocations after Close fail.
func (c *Coordinator) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	lease := c.leaseID
	c.mu.Unlock()
	c.cancel()
	<-c.done
	if _, err := c.cfg.Client.Revoke(ctx, lease); err != nil {
		return fmt.Errorf("transition: revoke lease: %w", err)
	}
	return nil
}
