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

	"github.com/allocator/allocator/pkg/bitmap/clusterip"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// loadConfig bounds a load run: it ends when stopped, after maxCreates
// creates, or after maxDuration, whichever is first.
type loadConfig struct {
	workers     int
	maxCreates  int
	maxDuration time.Duration
	// interval paces the run: one operation per interval across all
	// workers, so the load spans the switches instead of finishing
	// before the first one.
	interval time.Duration
	// prefix names the Services ("<prefix>-w<worker>-<n>").
	prefix string
	// statics are lower-band addresses handed to static creates, each once.
	statics []netip.Addr
	// staticEvery and deleteEvery: roughly one create in staticEvery is
	// static, one operation in deleteEvery deletes an earlier Service of
	// the worker.
	staticEvery, deleteEvery int
	seed                     uint64
}

// ack is what the load generator knows about a stored Service.
type ack struct {
	ip      netip.Addr
	via     string // replica(model, pid) that acknowledged it, or "read back via …"
	model   string // the acknowledging replica's model ("" when read back)
	static  bool
	at      time.Time
	deleted bool
	// deletedVia and deletedAt: the replica that acknowledged the delete, and when.
	deletedVia string
	deletedAt  time.Time
}

// load creates (and deletes some) Services through whichever replicas of a
// fleet are serving, and records every acknowledgement. It checks for
// duplicates as acknowledgements arrive: an address acknowledged for a
// Service while an earlier acknowledged Service holds it (and is not being
// deleted) is a duplicate ClusterIP.
type load struct {
	t   *testing.T
	f   *fleet
	cfg loadConfig

	mu        sync.Mutex
	services  map[string]*ack       // every acknowledged Service, by name; guarded by mu
	holder    map[netip.Addr]string // acknowledged address → Service name, while not being deleted; guarded by mu
	byModel   map[string]int        // acknowledged creates per replica model; guarded by mu
	byReplica map[string]int        // acknowledged creates per replica name+model; guarded by mu
	recovered int                   // creates retried after a lost answer and found stored; guarded by mu
	retries   int                   // requests retried after a connection error or 5xx; guarded by mu
	problems  []string              // duplicates, losses, refused requests; guarded by mu
	blocked   []string              // static retries refused because the lost attempt's claim leaked; guarded by mu
	creates   int                   // creates begun; guarded by mu
	deletes   int                   // deletes acknowledged; guarded by mu

	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

func startLoad(t *testing.T, f *fleet, cfg loadConfig) *load {
	l := &load{t: t, f: f, cfg: cfg, services: map[string]*ack{}, holder: map[netip.Addr]string{},
		byModel: map[string]int{}, byReplica: map[string]int{}, stop: make(chan struct{})}
	statics := make(chan netip.Addr, len(cfg.statics))
	for _, ip := range cfg.statics {
		statics <- ip
	}
	ticks := make(chan struct{})
	workersDone := make(chan struct{})
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
			case <-workersDone:
				return
			case <-deadline:
				return
			case <-ticker.C:
			}
			select {
			case ticks <- struct{}{}:
			case <-l.stop:
				return
			case <-workersDone:
				return
			case <-deadline:
				return
			}
		}
	}()
	var workers sync.WaitGroup
	for w := range cfg.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
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
				if l.creates >= cfg.maxCreates {
					l.mu.Unlock()
					return
				}
				l.creates++
				l.mu.Unlock()
				var static netip.Addr
				if cfg.staticEvery > 0 && rng.IntN(cfg.staticEvery) == 0 {
					select {
					case static = <-statics:
					default:
					}
				}
				name := fmt.Sprintf("%s-w%02d-%04d", cfg.prefix, w, n)
				if l.create(name, static, w+n) {
					mine = append(mine, name)
				}
			}
		}()
	}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		workers.Wait()
		close(workersDone)
	}()
	return l
}

// halt stops the load and waits for the operations in flight.
func (l *load) halt() {
	l.stopped.Do(func() { close(l.stop) })
	l.done.Wait()
}

// wait waits for a bounded load to end by itself.
func (l *load) wait() { l.done.Wait() }

func (l *load) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// retryable reports whether a request may have failed before (or without)
// being answered: a connection error, a timeout, 429 or a 5xx. Only such a
// request is retried.
func retryable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code >= 500 || code == 429
	}
	return true // not an answer of the server: connection refused/reset, EOF, timeout
}

const opDeadline = 60 * time.Second

// create creates one Service with the same name until it is acknowledged
// (or found stored after a lost answer). It returns whether the Service is
// known to be stored.
func (l *load) create(name string, static netip.Addr, turn int) bool {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if static.IsValid() {
		svc.Spec.ClusterIP = static.String()
	}
	deadline := time.Now().Add(opDeadline)
	var lastErr error
	lostVia := "" // a replica whose answer to an attempt was lost
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		ep := l.f.pick(turn + attempt)
		if ep == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ep.replica.inFlight.Add(1)
		out, err := ep.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		ep.replica.inFlight.Add(-1)
		cancel()
		switch {
		case err == nil:
			l.acknowledge(name, out, ep.String(), ep.model, static)
			return true
		case apierrors.IsAlreadyExists(err) && attempt > 0:
			// An earlier attempt was stored but its answer was lost.
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
			l.acknowledge(name, got, "read back via "+ep.String(), "", static)
			return true
		case static.IsValid() && lostVia != "" && apierrors.IsInvalid(err) && strings.Contains(err.Error(), "provided IP is already allocated"):
			// The lost attempt claimed the address and died before
			// storing the Service: its claim is a leak until repair
			// frees it (as upstream). Not a duplicate — unless the
			// Service is stored after all.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			got, gerr := ep.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			cancel()
			switch {
			case gerr == nil:
				l.acknowledge(name, got, "read back via "+ep.String(), "", static)
				return true
			case apierrors.IsNotFound(gerr):
				l.mu.Lock()
				l.blocked = append(l.blocked, fmt.Sprintf("%s %s (answer lost from %s, refused via %s)", name, static, lostVia, ep))
				l.mu.Unlock()
				return false
			default:
				lastErr = gerr
			}
		case retryable(err):
			lastErr = err
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				lostVia = ep.String()
			}
			l.mu.Lock()
			l.retries++
			l.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		default:
			l.problem("create %s (static %v) via %s refused: %v", name, static, ep, err)
			return false
		}
	}
	l.problem("create %s (static %v) never acknowledged within %s: %v", name, static, opDeadline, lastErr)
	return false
}

func (l *load) acknowledge(name string, svc *corev1.Service, via, model string, static netip.Addr) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		l.problem("Service %s acknowledged via %s with ClusterIP %q: %v", name, via, svc.Spec.ClusterIP, err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if static.IsValid() && ip != static {
		l.problems = append(l.problems, fmt.Sprintf("Service %s asked for %s, got %s via %s", name, static, ip, via))
	}
	if other, ok := l.holder[ip]; ok && other != name {
		o := l.services[other]
		l.problems = append(l.problems, fmt.Sprintf("DUPLICATE ClusterIP %s: %s acknowledged via %s at %s, %s acknowledged via %s at %s",
			ip, other, o.via, o.at.Format("15:04:05.000"), name, via, time.Now().Format("15:04:05.000")))
	}
	l.holder[ip] = name
	l.services[name] = &ack{ip: ip, via: via, model: model, static: static.IsValid(), at: time.Now()}
	if model != "" {
		l.byModel[model]++
		l.byReplica[via]++
	}
}

// delete deletes an acknowledged Service, retrying like create. The address
// stops counting as held before the request is sent, so a reuse right after
// the delete is not mistaken for a duplicate.
func (l *load) delete(name string, turn int) {
	l.mu.Lock()
	a := l.services[name]
	if l.holder[a.ip] == name {
		delete(l.holder, a.ip)
	}
	a.deleted = true
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
		switch {
		case err == nil, apierrors.IsNotFound(err) && attempt > 0:
			l.mu.Lock()
			l.deletes++
			a.deletedVia, a.deletedAt = ep.String(), time.Now()
			l.mu.Unlock()
			return
		case apierrors.IsNotFound(err):
			l.problem("acknowledged Service %s (%s, via %s) not found at delete via %s: a lost create", name, a.ip, a.via, ep)
			return
		case retryable(err):
			lastErr = err
			time.Sleep(100 * time.Millisecond)
		default:
			l.problem("delete %s via %s refused: %v", name, ep, err)
			return
		}
	}
	l.problem("delete %s never acknowledged within %s: %v", name, opDeadline, lastErr)
}

// acksVia returns how many creates the replica acknowledged in model.
func (l *load) acksVia(ep *endpoint) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byReplica[ep.String()]
}

// waitAcksVia waits until ep has acknowledged at least n creates, so the
// load provably overlaps the replica's time in its new model.
func (l *load) waitAcksVia(ep *endpoint, n int, timeout time.Duration) {
	l.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return l.acksVia(ep) >= n, nil
	})
	if err != nil {
		l.t.Errorf("%s acknowledged %d creates within %s, want %d (is the load still running?)", ep, l.acksVia(ep), timeout, n)
	}
}

// summary logs the run's figures and fails the test on every problem.
func (l *load) summary() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	replicas := make([]string, 0, len(l.byReplica))
	for r, n := range l.byReplica {
		replicas = append(replicas, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(replicas)
	statics := 0
	for _, a := range l.services {
		if a.static {
			statics++
		}
	}
	l.t.Logf("load (seed %d): %d creates begun, %d acknowledged (%d static), %d deleted, %d recovered by reading back after a lost answer, %d retried requests; per model %v; per replica %s",
		l.cfg.seed, l.creates, len(l.services), statics, l.deletes, l.recovered, l.retries, l.byModel, strings.Join(replicas, " "))
	for _, b := range l.blocked {
		l.t.Logf("static create refused on retry: the lost attempt's claim leaked: %s", b)
	}
	for _, p := range l.problems {
		l.t.Error(p)
	}
}

// history describes every Service the load knew with address ip.
func (l *load) history(ip netip.Addr) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name, a := range l.services {
		if a.ip != ip {
			continue
		}
		h := fmt.Sprintf("%s created via %s at %s", name, a.via, a.at.Format("15:04:05.000"))
		if a.deleted {
			h += fmt.Sprintf(", deleted via %s at %s", a.deletedVia, a.deletedAt.Format("15:04:05.000"))
		}
		out = append(out, h)
	}
	for _, b := range l.blocked {
		if strings.Contains(b, " "+ip.String()+" ") {
			out = append(out, "static retry refused: "+b)
		}
	}
	return out
}

// live returns the acknowledged, not deleted Services and their addresses.
func (l *load) live() map[string]netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]netip.Addr{}
	for name, a := range l.services {
		if !a.deleted {
			out[name] = a.ip
		}
	}
	return out
}

func (l *load) deleted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name, a := range l.services {
		if a.deleted {
			out = append(out, name)
		}
	}
	return out
}

// verifyStored checks that every Service the load knows to be stored is
// stored with its acknowledged address, that deleted ones are gone, and that
// no two stored Services share an address. It returns the stored Services.
func verifyStored(t *testing.T, f *fleet, l *load) []corev1.Service {
	t.Helper()
	ctx := context.Background()
	list, err := f.mustPick().client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Services: %v", err)
	}
	byIP := map[netip.Addr][]string{}
	stored := map[string]netip.Addr{}
	for _, svc := range list.Items {
		for _, text := range svc.Spec.ClusterIPs {
			ip, err := netip.ParseAddr(text)
			if err != nil {
				t.Errorf("Service %s/%s has ClusterIP %q", svc.Namespace, svc.Name, text)
				continue
			}
			byIP[ip] = append(byIP[ip], svc.Namespace+"/"+svc.Name)
		}
		if svc.Namespace == "default" {
			ip, _ := netip.ParseAddr(svc.Spec.ClusterIP)
			stored[svc.Name] = ip
		}
	}
	dups := 0
	for ip, names := range byIP {
		if len(names) > 1 {
			dups++
			t.Errorf("DUPLICATE ClusterIP %s stored for %v", ip, names)
		}
	}
	lost := 0
	for name, ip := range l.live() {
		got, ok := stored[name]
		switch {
		case !ok:
			lost++
			t.Errorf("LOST: acknowledged Service %s (%s, via %s) is not stored", name, ip, l.services[name].via)
		case got != ip:
			lost++
			t.Errorf("Service %s acknowledged with %s is stored with %s", name, ip, got)
		}
	}
	for _, name := range l.deleted() {
		if _, ok := stored[name]; ok {
			t.Errorf("Service %s was deleted (acknowledged) but is stored", name)
		}
	}
	t.Logf("stored: %d Services, %d duplicate ClusterIPs, %d acknowledged creates lost", len(list.Items), dups, lost)
	return list.Items
}

// verifyClaims polls (up to timeout, for the repair controllers) until every
// stored Service address is held by exactly its own IPAddress (parentRef =
// the Service, managed-by label) and, when bits is set, its bit is set in
// the primary RangeAllocation.
func verifyClaims(t *testing.T, f *fleet, cidr netip.Prefix, bits bool, timeout time.Duration) {
	t.Helper()
	rng := subrange.MustNew(cidr, model.Bitmap)
	store, err := clusterip.NewEtcdAllocator(f.etcd.Client(), etcdlayout.Layout{}.PrimaryServiceIPRange(), rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wrong []string
	start := time.Now()
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		wrong = wrong[:0]
		client := f.mustPick().client
		services, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("list Services: %v", err))
			return false, nil
		}
		ips, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("list IPAddresses: %v", err))
			return false, nil
		}
		objects := map[string]int{}
		for i, o := range ips.Items {
			objects[o.Name] = i
		}
		set := map[netip.Addr]bool{}
		if bits {
			if err := store.ForEach(ctx, func(ip netip.Addr) { set[ip] = true }); err != nil {
				wrong = append(wrong, fmt.Sprintf("read the bitmap: %v", err))
				return false, nil
			}
		}
		for _, svc := range services.Items {
			for _, text := range svc.Spec.ClusterIPs {
				ip, err := netip.ParseAddr(text)
				if err != nil {
					continue
				}
				i, ok := objects[ip.String()]
				if !ok {
					wrong = append(wrong, fmt.Sprintf("%s/%s %s: no IPAddress", svc.Namespace, svc.Name, ip))
				} else {
					o := ips.Items[i]
					ref := o.Spec.ParentRef
					if ref == nil || ref.Group != "" || ref.Resource != "services" || ref.Namespace != svc.Namespace || ref.Name != svc.Name {
						wrong = append(wrong, fmt.Sprintf("%s/%s %s: IPAddress parentRef %+v", svc.Namespace, svc.Name, ip, ref))
					}
					if o.Labels[ipaddress.LabelManagedBy] != ipaddress.ManagedBy {
						wrong = append(wrong, fmt.Sprintf("%s/%s %s: IPAddress labels %v", svc.Namespace, svc.Name, ip, o.Labels))
					}
				}
				if bits && rng.Contains(ip) && !set[ip] {
					wrong = append(wrong, fmt.Sprintf("%s/%s %s: bit not set", svc.Namespace, svc.Name, ip))
				}
			}
		}
		return len(wrong) == 0, nil
	})
	if err != nil {
		sort.Strings(wrong)
		t.Errorf("after %s, %d Service addresses are not held by their own records (bits checked: %v):\n%s",
			timeout, len(wrong), bits, strings.Join(wrong[:min(len(wrong), 30)], "\n"))
		return
	}
	t.Logf("every Service address held by its own IPAddress (and bit: %v) %s after the load", bits, time.Since(start).Round(time.Second))
}

// verifyNoRepairEvents fails on events that say an address was found not
// allocated, or allocated twice, by a repair controller. Each such event is
// reported with where and when it was recorded, and what the loads know of
// every address its message names.
func verifyNoRepairEvents(t *testing.T, f *fleet, loads ...*load) {
	t.Helper()
	events, err := f.mustPick().client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	bad := map[string]bool{report.ReasonNotAllocated: true, report.ReasonAlreadyAllocated: true, report.ReasonWrongReference: true}
	reasons := map[string]int{}
	for _, e := range events.Items {
		reasons[e.Reason]++
		if !bad[e.Reason] {
			continue
		}
		var history []string
		for _, word := range strings.Fields(e.Message) {
			ip, err := netip.ParseAddr(strings.Trim(word, ":;,()[]"))
			if err != nil {
				continue
			}
			for _, l := range loads {
				history = append(history, l.history(ip)...)
			}
		}
		t.Errorf("event %s on %s %s/%s: %s (count %d, first %s, last %s, from %s %s %s); the loads' Services with its address: %v",
			e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message, e.Count,
			e.FirstTimestamp.Format("15:04:05"), e.LastTimestamp.Format("15:04:05"),
			e.Source.Component, e.Source.Host, e.ReportingInstance, history)
	}
	t.Logf("events by reason: %v", reasons)
}
