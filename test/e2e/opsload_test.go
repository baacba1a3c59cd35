package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// opsLoad is the load of the operations scenarios (etcd out of space, a
// rolling upgrade): NodePort Services created and deleted through whichever
// replicas of a fleet are serving, every acknowledgement recorded with its
// ClusterIP and node port. Like load (load_test.go) it checks for
// duplicates as acknowledgements arrive; unlike it, it creates NodePort
// Services (so node ports are checked too) and it can record a 5xx answer
// instead of retrying it, which the out-of-space scenario needs to see
// every refusal.
type opsLoad struct {
	t   *testing.T
	f   *fleet
	cfg opsLoadConfig

	mu         sync.Mutex
	acks       map[string]*opsAck    // every acknowledged Service, by name; guarded by mu
	ipHolder   map[netip.Addr]string // acknowledged ClusterIP → Service, while not being deleted; guarded by mu
	portHolder map[int32]string      // acknowledged node port → Service, likewise; guarded by mu
	refused    []opsRefusal          // 5xx answers recorded (giveUpOn5xx); guarded by mu
	unsure     map[string]bool       // Services whose create or delete was refused or undone by a restore: stored or not; guarded by mu
	byVia      map[string]int        // acknowledged creates per replica process; guarded by mu
	problems   []string              // duplicates, losses, unexpected answers; guarded by mu
	creates    int                   // creates begun; guarded by mu
	deletes    int                   // deletes acknowledged; guarded by mu
	recovered  int                   // creates found stored after a lost answer; guarded by mu
	retries    int                   // requests retried; guarded by mu
	// lostFrom and lostUntil: etcd was restored from a snapshot taken at
	// lostFrom and had stopped for it by lostUntil (forgetAfter). What was
	// acknowledged in between may be undone; guarded by mu.
	lostFrom, lostUntil time.Time
	lostToRestore       int // deletes that found their Service undone by the restore; guarded by mu

	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

type opsLoadConfig struct {
	workers int
	// interval paces the run: one operation per interval across all workers.
	interval    time.Duration
	maxDuration time.Duration
	maxCreates  int
	prefix      string
	// deleteEvery: roughly one operation in deleteEvery deletes an earlier
	// Service of the worker.
	deleteEvery int
	seed        uint64
	// giveUpOn5xx records a 5xx answer (refused) and moves on to the next
	// Service instead of retrying it.
	giveUpOn5xx bool
}

// opsAck is what the load knows about an acknowledged Service.
type opsAck struct {
	ip       netip.Addr
	nodePort int32
	via      string
	started  time.Time // when the request that was acknowledged was sent
	at       time.Time
	deleted  bool
	// deletedVia and deletedAt: who acknowledged the delete, and when;
	// deleteStarted: when it was first sent.
	deletedVia    string
	deletedAt     time.Time
	deleteStarted time.Time
}

// opsRefusal is a 5xx answer the load recorded.
type opsRefusal struct {
	op, name, via string
	at            time.Time
	code          int32
	message       string
}

func startOpsLoad(t *testing.T, f *fleet, cfg opsLoadConfig) *opsLoad {
	l := &opsLoad{t: t, f: f, cfg: cfg, acks: map[string]*opsAck{}, ipHolder: map[netip.Addr]string{},
		portHolder: map[int32]string{}, byVia: map[string]int{}, unsure: map[string]bool{}, stop: make(chan struct{})}
	if cfg.maxCreates == 0 {
		cfg.maxCreates = 1 << 30
		l.cfg = cfg
	}
	ticks := make(chan struct{})
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		defer close(ticks)
		ticker := time.NewTicker(cfg.interval)
		defer ticker.Stop()
		deadline := time.After(cfg.maxDuration)
		for {
			select {
			case <-l.stop:
				return
			case <-deadline:
				return
			case <-ticker.C:
			}
			select {
			case ticks <- struct{}{}:
			case <-l.stop:
				return
			case <-deadline:
				return
			}
		}
	}()
	for w := range cfg.workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(w)))
			var mine []string
			for n := 0; ; n++ {
				if _, ok := <-ticks; !ok {
					return
				}
				if cfg.deleteEvery > 0 && len(mine) > 3 && rng.IntN(cfg.deleteEvery) == 0 {
					i := rng.IntN(len(mine))
					name := mine[i]
					mine = slices.Delete(mine, i, i+1)
					l.delete(name, w+n)
					continue
				}
				l.mu.Lock()
				if l.creates >= l.cfg.maxCreates {
					l.mu.Unlock()
					continue // deletes go on until the load is stopped
				}
				l.creates++
				l.mu.Unlock()
				name := fmt.Sprintf("%s-w%02d-%05d", cfg.prefix, w, n)
				if l.create(name, w+n) {
					mine = append(mine, name)
				}
			}
		}()
	}
	return l
}

// halt stops the load and waits for the operations in flight.
func (l *opsLoad) halt() {
	l.stopped.Do(func() { close(l.stop) })
	l.done.Wait()
}

func (l *opsLoad) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// statusCode is the HTTP status of an API answer, 0 when err is not one
// (connection refused or reset, EOF, a client timeout).
func statusCode(err error) int32 {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}

// create creates one NodePort Service and reports whether it is known to be
// stored. Without giveUpOn5xx it retries like load.create: 5xx, 429 and
// connection errors on the same name, an AlreadyExists after a lost answer
// read back.
func (l *opsLoad) create(name string, turn int) bool {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
	deadline := time.Now().Add(opDeadline)
	var lastErr error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		ep := l.f.pick(turn + attempt)
		if ep == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		started := time.Now()
		ep.replica.inFlight.Add(1)
		out, err := ep.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		ep.replica.inFlight.Add(-1)
		cancel()
		code := statusCode(err)
		switch {
		case err == nil:
			l.acknowledge(name, out, ep.String(), started)
			return true
		case apierrors.IsAlreadyExists(err) && attempt > 0:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			got, gerr := ep.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			cancel()
			if gerr != nil {
				lastErr = gerr
				continue
			}
			l.mu.Lock()
			l.recovered++
			l.mu.Unlock()
			l.acknowledge(name, got, "read back via "+ep.String(), started)
			return true
		case code >= 500 && l.cfg.giveUpOn5xx:
			// The Service may be stored all the same: a write that etcd
			// applied and then refused ("database space exceeded" at
			// apply) is not undone.
			l.mu.Lock()
			l.refused = append(l.refused, opsRefusal{op: "create", name: name, via: ep.String(), at: time.Now(), code: code, message: err.Error()})
			l.unsure[name] = true
			l.mu.Unlock()
			return false
		case code == 0 || code >= 500 || code == 429:
			lastErr = err
			l.mu.Lock()
			l.retries++
			l.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		default:
			l.problem("create %s via %s refused: %v", name, ep, err)
			return false
		}
	}
	l.problem("create %s never acknowledged within %s: %v", name, opDeadline, lastErr)
	return false
}

func (l *opsLoad) acknowledge(name string, svc *corev1.Service, via string, started time.Time) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		l.problem("Service %s acknowledged via %s with ClusterIP %q and ports %+v", name, via, svc.Spec.ClusterIP, svc.Spec.Ports)
		return
	}
	port := svc.Spec.Ports[0].NodePort
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lostUntil.IsZero() && started.Before(l.lostUntil) {
		// Sent before etcd was stopped for the restore: its write may be
		// in the history the restore undid.
		l.acks[name] = &opsAck{ip: ip, nodePort: port, via: via, started: started, at: now}
		l.unsure[name] = true
		return
	}
	if other, ok := l.ipHolder[ip]; ok && other != name {
		l.problems = append(l.problems, fmt.Sprintf("DUPLICATE ClusterIP %s: %s acknowledged via %s at %s, %s via %s at %s",
			ip, other, l.acks[other].via, l.acks[other].at.Format("15:04:05.000"), name, via, now.Format("15:04:05.000")))
	}
	if other, ok := l.portHolder[port]; ok && other != name {
		l.problems = append(l.problems, fmt.Sprintf("DUPLICATE node port %d: %s acknowledged via %s at %s, %s via %s at %s",
			port, other, l.acks[other].via, l.acks[other].at.Format("15:04:05.000"), name, via, now.Format("15:04:05.000")))
	}
	l.ipHolder[ip], l.portHolder[port] = name, name
	l.acks[name] = &opsAck{ip: ip, nodePort: port, via: via, started: started, at: now}
	l.byVia[via]++
}

// delete deletes an acknowledged Service. Its address and node port stop
// counting as held before the request is sent, so a reuse right after the
// delete is not taken for a duplicate.
func (l *opsLoad) delete(name string, turn int) {
	l.mu.Lock()
	a := l.acks[name]
	if l.ipHolder[a.ip] == name {
		delete(l.ipHolder, a.ip)
	}
	if l.portHolder[a.nodePort] == name {
		delete(l.portHolder, a.nodePort)
	}
	a.deleted = true
	a.deleteStarted = time.Now()
	l.mu.Unlock()
	deadline := time.Now().Add(opDeadline)
	var lastErr error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		ep := l.f.pick(turn + attempt)
		if ep == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ep.replica.inFlight.Add(1)
		err := ep.client.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{})
		ep.replica.inFlight.Add(-1)
		cancel()
		code := statusCode(err)
		switch {
		case err == nil, apierrors.IsNotFound(err) && attempt > 0:
			l.mu.Lock()
			l.deletes++
			a.deletedVia, a.deletedAt = ep.String(), time.Now()
			if !l.lostUntil.IsZero() && a.deleteStarted.Before(l.lostUntil) {
				l.unsure[name] = true // the restore may bring it back
			}
			l.mu.Unlock()
			return
		case apierrors.IsNotFound(err) && l.isUnsure(name):
			l.mu.Lock()
			l.lostToRestore++
			l.mu.Unlock()
			return
		case apierrors.IsNotFound(err):
			l.problem("acknowledged Service %s (%s, via %s) not found at delete via %s: a lost create", name, a.ip, a.via, ep)
			return
		case code >= 500 && l.cfg.giveUpOn5xx:
			l.mu.Lock()
			l.refused = append(l.refused, opsRefusal{op: "delete", name: name, via: ep.String(), at: time.Now(), code: code, message: err.Error()})
			l.unsure[name] = true
			l.mu.Unlock()
			return
		case code == 0 || code >= 500 || code == 429:
			lastErr = err
			l.mu.Lock()
			l.retries++
			l.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		default:
			l.problem("delete %s via %s refused: %v", name, ep, err)
			return
		}
	}
	l.problem("delete %s never acknowledged within %s: %v", name, opDeadline, lastErr)
}

// isUnsure reports whether name's create or delete may or may not be stored.
func (l *opsLoad) isUnsure(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unsure[name]
}

// forgetAfter is called once etcd has stopped, to be restored from a
// snapshot taken at snapshotStart. Every create acknowledged since, and every
// create or delete sent before now and acknowledged later, may be undone by
// the restore: the load no longer counts their addresses and node ports as
// held (a create after the restore may rightly get them) and does not check
// them against etcd. A delete acknowledged since may be undone too: the
// Service comes back.
func (l *opsLoad) forgetAfter(snapshotStart time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lostFrom, l.lostUntil = snapshotStart, time.Now()
	for name, a := range l.acks {
		switch {
		case a.deleted && (a.deletedAt.IsZero() || !a.deletedAt.Before(snapshotStart)):
			l.unsure[name] = true
		case !a.deleted && !a.at.Before(snapshotStart):
			l.unsure[name] = true
			if l.ipHolder[a.ip] == name {
				delete(l.ipHolder, a.ip)
			}
			if l.portHolder[a.nodePort] == name {
				delete(l.portHolder, a.nodePort)
			}
		}
	}
}

// firstAckAfter returns the first acknowledgement of a create at or after
// t0, and whether there is one.
func (l *opsLoad) firstAckAfter(t0 time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, a := range l.acks {
		if !a.at.Before(t0) && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	return first, !first.IsZero()
}

// acked returns the number of acknowledged creates.
func (l *opsLoad) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// deleted returns the number of acknowledged deletes.
func (l *opsLoad) deleted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deletes
}

// ackedVia returns how many creates the endpoint's process acknowledged.
func (l *opsLoad) ackedVia(ep *endpoint) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byVia[ep.String()]
}

// waitFor polls cond until it holds or timeout passes, and reports whether it
// held.
func waitFor(timeout time.Duration, cond func() bool) bool {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	return err == nil
}

// explainLeaks logs, for each leaked record of an audit ("bit 10.0.0.5",
// "IPAddress 10.0.0.5", "node port 30005"), the load's Services that held
// it, so a leak can be traced to the operations around it.
func (l *opsLoad) explainLeaks(leaks []string) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, leak := range leaks {
		fields := strings.Fields(leak)
		what := fields[len(fields)-1]
		var history []string
		for name, a := range l.acks {
			if a.ip.String() != what && fmt.Sprint(a.nodePort) != what {
				continue
			}
			h := fmt.Sprintf("%s (%s, node port %d) created via %s at %s", name, a.ip, a.nodePort, a.via, a.at.Format("15:04:05.000"))
			if a.deleted {
				h += fmt.Sprintf(", deleted via %s at %s", a.deletedVia, a.deletedAt.Format("15:04:05.000"))
			}
			history = append(history, h)
		}
		for _, r := range l.refused {
			if strings.Contains(r.message, " "+what+" ") {
				history = append(history, fmt.Sprintf("%s %s refused via %s at %s: %s", r.op, r.name, r.via, r.at.Format("15:04:05.000"), r.message))
			}
		}
		l.t.Logf("leaked %s; the load's Services with it: %v", leak, history)
	}
}

// refusals returns the recorded 5xx answers.
func (l *opsLoad) refusals() []opsRefusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.refused)
}

// firstAckStartedAfter returns the acknowledgement time of the first create
// sent at or after t0, and whether there is one.
func (l *opsLoad) firstAckStartedAfter(t0 time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, a := range l.acks {
		if !a.started.Before(t0) && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	return first, !first.IsZero()
}

// summary logs the run's figures and fails the test on every problem.
func (l *opsLoad) summary() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	via := make([]string, 0, len(l.byVia))
	for v, n := range l.byVia {
		via = append(via, fmt.Sprintf("%s=%d", v, n))
	}
	sort.Strings(via)
	l.t.Logf("load (seed %d): %d creates begun, %d acknowledged, %d deleted, %d refused with 5xx (recorded), %d recovered by reading back, %d retried requests, %d unsure, %d deletes found their Service undone by a restore; per replica process: %s",
		l.cfg.seed, l.creates, len(l.acks), l.deletes, len(l.refused), l.recovered, l.retries, len(l.unsure), l.lostToRestore, strings.Join(via, " "))
	for _, p := range l.problems {
		l.t.Error(p)
	}
}

// verifyAcks compares what the load was told with what etcd holds: every
// acknowledged Service not deleted is stored with its ClusterIP and node
// port, every acknowledged delete is gone. Services whose create or delete
// was refused may be either. It returns the number of acknowledged creates
// lost (missing or changed), and of refused creates stored all the same.
func (l *opsLoad) verifyAcks(a claimAudit) (lost, storedAnyway int) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	unsure := l.unsure
	for name, ack := range l.acks {
		h, stored := a.stored["default/"+name]
		switch {
		case unsure[name]:
		case ack.deleted && stored:
			l.t.Errorf("Service %s: delete acknowledged, still stored", name)
		case ack.deleted:
		case !stored:
			lost++
			l.t.Errorf("LOST: acknowledged Service %s (%s, node port %d, via %s) is not stored", name, ack.ip, ack.nodePort, ack.via)
		case h.ip != ack.ip || !slices.Equal(h.nodePorts, []int32{ack.nodePort}):
			lost++
			l.t.Errorf("Service %s acknowledged with %s and node port %d is stored with %s and %v", name, ack.ip, ack.nodePort, h.ip, h.nodePorts)
		}
	}
	// Stored Services of the load that it never had acknowledged must be
	// ones it was unsure of.
	for key := range a.stored {
		name := strings.TrimPrefix(key, "default/")
		switch {
		case !strings.HasPrefix(name, l.cfg.prefix+"-") || l.acks[name] != nil:
		case unsure[name]:
			storedAnyway++
			l.t.Logf("Service %s: create refused, stored all the same (%s, node ports %v)", name, a.stored[key].ip, a.stored[key].nodePorts)
		default:
			l.t.Errorf("Service %s is stored but its create was neither acknowledged nor refused", name)
		}
	}
	return lost, storedAnyway
}
