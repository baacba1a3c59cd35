package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/procstat"
)

// The paired comparison answers "how much slower is a create at 90% fill
// than at 0%" without the drift of a shared machine: the fill run compares
// its first tenth with its last, a minute and a half apart, and eight runs
// of one build spread from 0.69 to 1.07 (docs/performance.md). Here the
// filled server gives back the fill's last cfg.burst Services, and then it
// and an empty one with the same ServiceCIDRs take bursts of cfg.burst
// creates in turn (ABBA order), so both see the same machine: with the
// defaults the filled server's bursts fill its ninth tenth again and the
// empty one's its first. Each burst's Services are deleted after it.

// server is one side of the comparison.
type server struct {
	name   string
	client kubernetes.Interface
	meter  procstat.Meter
}

// burst is what one burst of creates measured.
type burst struct {
	creates int
	rate    float64       // creates acknowledged per second
	cpu     time.Duration // the server's CPU (etcd included) over the burst
	gc      gcCounters    // what its garbage collector did meanwhile
	// unsettled: the servers were still busy when it started (settle
	// gave up waiting); the table marks its round.
	unsettled bool
}

// gcCounters are two of the Go runtime's counters, from a server's
// /metrics: the CPU its garbage collector spent, and the bytes allocated.
//
// A short burst does not pay for its own garbage: the filled server, with
// 0.9 GB live, collects once in about 9,000 creates, and its collection
// then runs largely between bursts, while the empty one collects several
// times inside each burst. So the CPU per create is also given with the
// garbage collection charged by allocation: the burst's CPU without its
// collector's, plus the bytes it allocated times the server's collector
// CPU per byte over the whole comparison.
type gcCounters struct{ cpuSeconds, allocBytes float64 }

func (a gcCounters) sub(b gcCounters) gcCounters {
	return gcCounters{a.cpuSeconds - b.cpuSeconds, a.allocBytes - b.allocBytes}
}

func readGC(ctx context.Context, client kubernetes.Interface) (gcCounters, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return gcCounters{}, fmt.Errorf("read /metrics: %w", err)
	}
	return parseGC(raw)
}

// parseGC reads the two counters from a Prometheus text exposition.
func parseGC(raw []byte) (gcCounters, error) {
	var c gcCounters
	found := 0
	for line := range strings.Lines(string(raw)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		var dst *float64
		switch {
		case !ok:
			continue
		case name == "go_cpu_classes_gc_total_cpu_seconds_total":
			dst = &c.cpuSeconds
		case name == "go_gc_heap_allocs_bytes_total":
			dst = &c.allocBytes
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return gcCounters{}, fmt.Errorf("/metrics %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if found != 2 {
		return gcCounters{}, fmt.Errorf("/metrics: the Go runtime's GC CPU and allocation counters are missing")
	}
	return c, nil
}

func compare(ctx context.Context, cfg config, filled, empty server) error {
	if err := createCIDRs(ctx, empty.client, cfg); err != nil {
		return fmt.Errorf("ServiceCIDRs of the empty server: %w", err)
	}
	const ns = "scale"
	for _, s := range []server{filled, empty} {
		_, err := s.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace on the %s server: %w", s.name, err)
		}
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return fmt.Errorf("profile directory: %w", err)
		}
	}
	if cfg.burst > cfg.services {
		return fmt.Errorf("--burst %d is more than the %d Services filled", cfg.burst, cfg.services)
	}
	if err := deleteNamed(ctx, filled.client, ns, "s-", cfg.services-cfg.burst, cfg.services, cfg.concurrency); err != nil {
		return fmt.Errorf("give back the fill's last %d Services: %w", cfg.burst, err)
	}
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churns sync.WaitGroup
	churnErrs := make([]error, 2)
	for i, s := range []server{filled, empty} {
		churns.Go(func() { churnErrs[i] = churn(churnCtx, s.client, cfg.churn, "paired-churn-", "fd03").err })
	}
	results, whole, err := measure(ctx, cfg, ns, filled, empty)
	stopChurn()
	churns.Wait()
	if err != nil {
		return err
	}
	for i, err := range churnErrs {
		if err != nil {
			return fmt.Errorf("ServiceCIDR churn on the %s server: %w", []string{"filled", "empty"}[i], err)
		}
	}
	reportPairs(cfg, results, whole)
	return nil
}

// measure runs the bursts and returns them with each server's collector
// CPU and allocation over all of them, the filled server's first.
func measure(ctx context.Context, cfg config, ns string, filled, empty server) ([][2]burst, [2]gcCounters, error) {
	var before, whole [2]gcCounters
	servers := []server{filled, empty}
	for k, s := range servers {
		var err error
		if before[k], err = readGC(ctx, s.client); err != nil {
			return nil, whole, err
		}
	}
	results, err := pairedBursts(ctx, cfg, ns, filled, empty)
	if err != nil {
		return nil, whole, err
	}
	for k, s := range servers {
		after, err := readGC(ctx, s.client)
		if err != nil {
			return nil, whole, err
		}
		whole[k] = after.sub(before[k])
	}
	return results, whole, nil
}

// pairedBursts runs cfg.pairs rounds; each has one burst on either server,
// the filled one first in even rounds.
func pairedBursts(ctx context.Context, cfg config, ns string, filled, empty server) ([][2]burst, error) {
	var out [][2]burst
	for r := range cfg.pairs {
		var pair [2]burst
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, k := range order {
			s := []server{filled, empty}[k]
			settled, err := settle(ctx, filled.meter, empty.meter)
			if err != nil {
				return nil, err
			}
			b, err := oneBurst(ctx, cfg, s, ns, fmt.Sprintf("p%02d-", r))
			if err != nil {
				return nil, fmt.Errorf("round %d on the %s server: %w", r+1, s.name, err)
			}
			b.unsettled = !settled
			pair[k] = b
		}
		out = append(out, pair)
	}
	return out, nil
}

// oneBurst creates cfg.burst Services on s, measures them, and deletes
// them again.
func oneBurst(ctx context.Context, cfg config, s server, ns, prefix string) (burst, error) {
	c := cfg
	c.meter = procstat.Meter{} // the burst's CPU is read around it, not at each create
	gc0, err := readGC(ctx, s.client)
	if err != nil {
		return burst{}, err
	}
	cpu0, err := s.meter.Total()
	if err != nil {
		return burst{}, err
	}
	profiled := make(chan error, 1)
	if cfg.profileDir != "" {
		go func() {
			profiled <- profile(ctx, s, filepath.Join(cfg.profileDir, s.name+"-"+strings.TrimSuffix(prefix, "-")+".pprof"))
		}()
	} else {
		profiled <- nil
	}
	res, err := createNamed(ctx, s.client, ns, prefix, cfg.burst, c, cfg.burst)
	var cpu1 time.Duration
	var gc1 gcCounters
	if err == nil {
		cpu1, err = s.meter.Total()
	}
	if err == nil {
		gc1, err = readGC(ctx, s.client)
	}
	// The profile ends after the burst when the burst is short; the
	// burst's figures are taken before waiting for it.
	if perr := <-profiled; err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return burst{}, err
	}
	if ip, dup := firstDuplicate(res.ips); dup {
		return burst{}, fmt.Errorf("DUPLICATE: %s given to two Services", ip)
	}
	b := burst{creates: len(res.creates), rate: float64(len(res.creates)) / res.elapsed.Seconds(), cpu: cpu1 - cpu0, gc: gc1.sub(gc0)}
	return b, deleteNamed(ctx, s.client, ns, prefix, 0, cfg.burst, cfg.concurrency)
}

// profileSeconds is how long a burst's CPU profile runs: most of a burst
// of 10,000 creates.
const profileSeconds = 6

// profile saves a CPU profile of the server s, taken while its burst runs.
func profile(ctx context.Context, s server, path string) error {
	raw, err := s.client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(profileSeconds)).Timeout(2 * profileSeconds * time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("CPU profile of the %s server: %w", s.name, err)
	}
	return os.WriteFile(path, raw, 0o644)
}

// deleteNamed deletes the Services createNamed made with prefix, numbered
// from to below to.
func deleteNamed(ctx context.Context, client kubernetes.Interface, ns, prefix string, from, to, concurrency int) error {
	return forEach(from, to, concurrency, func(i int) error {
		name := fmt.Sprintf("%s%06d", prefix, i)
		if err := client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		return nil
	})
}

// settle waits, at most 15 s, until the servers are near idle (a tenth of
// a core between them over half a second): the deletes of the burst before
// must not be paid by the next. It reports false when they were still busy.
func settle(ctx context.Context, meters ...procstat.Meter) (bool, error) {
	const window, idle = 500 * time.Millisecond, 50 * time.Millisecond
	deadline := time.Now().Add(15 * time.Second)
	total := func() (time.Duration, error) {
		var sum time.Duration
		for _, m := range meters {
			t, err := m.Total()
			if err != nil {
				return 0, err
			}
			sum += t
		}
		return sum, nil
	}
	for time.Now().Before(deadline) {
		t0, err := total()
		if err != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(window):
		}
		t1, err := total()
		if err != nil {
			return false, err
		}
		if t1-t0 <= idle {
			return true, nil
		}
	}
	return false, nil // busy still: measured anyway, and marked in the table
}

// reportPairs prints each round and the medians; whole is each server's
// collector CPU and allocation over the comparison, filled first.
func reportPairs(cfg config, pairs [][2]burst, whole [2]gcCounters) {
	v4Capacity := cfg.v4Capacity()
	pct := func(n int) float64 { return 100 * float64(n) / float64(v4Capacity) }
	base, step := v4Count(cfg.services-cfg.burst, cfg.v6Every), v4Count(cfg.burst, cfg.v6Every)
	fmt.Printf("paired bursts of %d creates at %d clients, in turn on the filled server (IPv4 fill %.1f→%.1f%%) and on an empty one with the same ServiceCIDRs (0→%.1f%%):\n",
		cfg.burst, cfg.concurrency, pct(base), pct(base+step), pct(step))
	var perByte [2]float64 // collector CPU seconds per byte allocated
	for k, w := range whole {
		if w.allocBytes > 0 {
			perByte[k] = w.cpuSeconds / w.allocBytes
		}
	}
	fmt.Printf("garbage collection over the comparison: filled %.2f ms, empty %.2f ms of CPU per MB allocated\n",
		perByte[0]*1e3*(1<<20), perByte[1]*1e3*(1<<20))
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "round\tfilled/s\tempty/s\tratio\tfilled cpu-ms/op\tempty cpu-ms/op\tGC charged: filled\tempty\tratio\t")
	var ratios, charged [2][]float64
	var rates []float64
	unsettled := false
	for r, p := range pairs {
		round := strconv.Itoa(r + 1)
		if p[0].unsettled || p[1].unsettled {
			round += "*"
			unsettled = true
		}
		var raw, fair [2]float64
		for k, b := range p {
			raw[k] = b.cpu.Seconds() * 1e3 / float64(b.creates)
			fair[k] = (b.cpu.Seconds() - b.gc.cpuSeconds + b.gc.allocBytes*perByte[k]) * 1e3 / float64(b.creates)
			charged[k] = append(charged[k], fair[k])
		}
		rates = append(rates, p[0].rate/p[1].rate)
		ratios[0] = append(ratios[0], raw[0]/raw[1])
		ratios[1] = append(ratios[1], fair[0]/fair[1])
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", round, p[0].rate, p[1].rate, p[0].rate/p[1].rate,
			raw[0], raw[1], fair[0], fair[1], fair[0]/fair[1])
	}
	w.Flush()
	if unsettled {
		fmt.Println("* a burst of this round started with the servers still busy 15 s after the one before")
	}
	fmt.Printf("paired rate ratio (filled / empty), median of %d rounds: %.2f\n", len(pairs), median(rates))
	fmt.Printf("paired CPU per create with GC charged by allocation, medians: filled %.2f ms, empty %.2f ms; ratio median %.2f (raw %.2f)\n",
		median(charged[0]), median(charged[1]), median(ratios[1]), median(ratios[0]))
}

// v4Count is how many of the first n Services are IPv4 (createNamed makes
// every v6Every-th IPv6).
func v4Count(n, v6Every int) int {
	if v6Every <= 0 {
		return n
	}
	return n - n/v6Every
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
