package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Whether etcd answers, told once. The etcd client retries quietly (its log
// goes to klog at -v=3 and above), and the server's own checks read etcd
// through the server's client: an outage is a line when an endpoint stops
// answering, a reminder a minute while it stays so, a line when it answers
// again, and a line when no endpoint answers at all, with since when.
const (
	reachInterval = 2 * time.Second
	reachTimeout  = 2 * time.Second
	reachRemind   = time.Minute
)

// reachProber asks one endpoint for its status.
type reachProber func(ctx context.Context, endpoint string) error

// endpointDown is what is known of an endpoint that does not answer.
type endpointDown struct {
	since, logged time.Time
	err           error
}

// etcdReach probes the server's etcd endpoints and logs their outages.
type etcdReach struct {
	probe     reachProber
	endpoints []string
	log       klog.Logger
	now       func() time.Time

	mu   sync.Mutex
	down map[string]*endpointDown // guarded by mu
	// allDown is since when no endpoint answers (zero: one does); allLogged
	// when that was last logged. Guarded by mu.
	allDown, allLogged time.Time
}

func newEtcdReach(c *clientv3.Client, endpoints []string, log klog.Logger) *etcdReach {
	probe := func(ctx context.Context, endpoint string) error {
		_, err := c.Status(ctx, endpoint)
		return err
	}
	return &etcdReach{probe: probe, endpoints: endpoints, log: log, now: time.Now, down: map[string]*endpointDown{}}
}

// run probes every reachInterval until ctx ends.
func (r *etcdReach) run(ctx context.Context) {
	t := time.NewTicker(reachInterval)
	defer t.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round probes every endpoint once, at the same time, and logs what changed.
func (r *etcdReach) round(ctx context.Context) {
	errs := make([]error, len(r.endpoints))
	var wg sync.WaitGroup
	for i, ep := range r.endpoints {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, reachTimeout)
			defer cancel()
			errs[i] = r.probe(pctx, ep)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	answered := false
	var last error
	for i, ep := range r.endpoints {
		r.note(now, ep, errs[i])
		if errs[i] == nil {
			answered = true
		} else {
			last = errs[i]
		}
	}
	switch {
	case answered && !r.allDown.IsZero():
		r.log.Info("etcd answers again", "unreachableFor", now.Sub(r.allDown).Round(time.Second))
		r.allDown = time.Time{}
	case !answered && r.allDown.IsZero():
		r.allDown, r.allLogged = now, now
		r.log.Error(last, "etcd is unreachable: no endpoint answers; Service writes fail until one does", "since", now.Format(time.RFC3339), "endpoints", r.endpoints)
	case !answered && now.Sub(r.allLogged) >= reachRemind:
		r.allLogged = now
		r.log.Error(last, "etcd is still unreachable", "since", r.allDown.Format(time.RFC3339), "for", now.Sub(r.allDown).Round(time.Second))
	}
}

// note records one endpoint's answer, logging a change and, while it stays
// down, a reminder. The caller holds r.mu.
func (r *etcdReach) note(now time.Time, ep string, err error) {
	d, wasDown := r.down[ep]
	switch {
	case err == nil && wasDown:
		delete(r.down, ep)
		r.log.Info("etcd endpoint answers again", "endpoint", ep, "unreachableFor", now.Sub(d.since).Round(time.Second))
	case err != nil && !wasDown:
		r.down[ep] = &endpointDown{since: now, logged: now, err: err}
		r.log.Info("etcd endpoint unreachable", "endpoint", ep, "since", now.Format(time.RFC3339), "err", err.Error())
	case err != nil && now.Sub(d.logged) >= reachRemind:
		d.logged, d.err = now, err
		r.log.Info("etcd endpoint still unreachable", "endpoint", ep, "since", d.since.Format(time.RFC3339),
			"for", now.Sub(d.since).Round(time.Second), "err", err.Error())
	}
}

// etcdGetCheck is a health check that reads one key through the server's
// own etcd client, at most once a second, within timeout: the etcd and
// etcd-readiness checks, without a client of their own (whose log would
// be apart from the server's).
type etcdGetCheck struct {
	name    string
	kv      clientv3.KV
	key     string
	timeout time.Duration

	mu     sync.Mutex
	last   error     // guarded by mu
	lastAt time.Time // guarded by mu
	failed time.Time // since when reads fail (zero: they do not); guarded by mu
}

func (c *etcdGetCheck) Name() string { return c.name }

func (c *etcdGetCheck) Check(*http.Request) error {
	c.mu.Lock()
	if !c.lastAt.IsZero() && time.Since(c.lastAt) < time.Second {
		err := c.last
		c.mu.Unlock()
		return err
	}
	c.lastAt = time.Now()
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	_, err := c.kv.Get(ctx, c.key, clientv3.WithCountOnly())
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.failed, c.last = time.Time{}, nil
	case c.failed.IsZero():
		c.failed = time.Now()
		fallthrough
	default:
		c.last = fmt.Errorf("etcd did not answer a read within %v (failing since %s): %w", c.timeout, c.failed.Format(time.RFC3339), err)
	}
	return c.last
}
