// Command scale fills a dual-stack IPAddress-model server with Services over
// many ServiceCIDRs, as KEP-1880 promised ("O(10K) Services and O(1K)
// ranges"): it creates the ServiceCIDRs (IPv4 /24s and IPv6 /112s), then the
// Services with many clients while ServiceCIDRs are added and deleted
// beside them, and prints the create rate, latency and the server's CPU per
// create for each tenth of the IPv4 space filled, and its memory at the end.
// It fails when two Services got the same address. hack/scale.sh runs it
// against a fresh `allocator serve` and adds start-up, repair and etcd
// figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/procstat"
)

type config struct {
	kubeconfig  string
	cidrs       int // ServiceCIDRs made before the Services
	v4CIDRs     int // of which IPv4 /24s; the rest are IPv6 /112s
	services    int
	v6Every     int // every v6Every-th Service is IPv6 single-stack
	concurrency int
	churn       time.Duration // one ServiceCIDR added and one deleted every churn
	defaultV4   int           // addresses of the default ServiceCIDR's IPv4 range
	v4Base      netip.Addr    // the first IPv4 ServiceCIDR's network; the next ones follow it
	meter       procstat.Meter
	pairs       int // rounds of the paired comparison
	burst       int // creates per burst in it
	profileDir  string
}

func main() {
	var cfg config
	var pids string
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "admin kubeconfig of the server")
	flag.IntVar(&cfg.cidrs, "cidrs", 1000, "ServiceCIDRs to create before the Services")
	flag.IntVar(&cfg.v4CIDRs, "v4-cidrs", 392, "how many of them are IPv4 /24s (the rest are IPv6 /112s); 392 /24s and the default /24 leave 99,821 addresses, 90% of which the default 90,000 IPv4 Services fill")
	flag.IntVar(&cfg.services, "services", 100000, "Services to create")
	flag.IntVar(&cfg.v6Every, "v6-every", 10, "every N-th Service is IPv6 single-stack (0: none)")
	flag.IntVar(&cfg.concurrency, "concurrency", 32, "clients creating Services")
	flag.DurationVar(&cfg.churn, "churn", 2*time.Second, "add one ServiceCIDR and delete one every interval while the Services are created (0: none)")
	flag.IntVar(&cfg.defaultV4, "default-v4", 254, "usable addresses of the default ServiceCIDR's IPv4 range (counted in the fill)")
	defaultRange := flag.String("default-v4-range", "", "the default ServiceCIDR's IPv4 range, e.g. 10.96.0.0/12: its usable addresses replace --default-v4, and the IPv4 ServiceCIDRs follow it when it holds 10.100.0.0")
	flag.StringVar(&pids, "pids", "", "comma-separated pids of the server's processes (etcd included) whose CPU and memory are reported")
	compareWith := flag.String("compare-with", "", "kubeconfig of an empty server: instead of filling --kubeconfig's server, which is filled already, give it this one's ServiceCIDRs and alternate bursts of creates between the two (paired.go)")
	comparePIDs := flag.String("compare-pids", "", "comma-separated pids of the empty server's processes")
	flag.IntVar(&cfg.pairs, "pairs", 6, "rounds of the paired comparison")
	flag.IntVar(&cfg.burst, "burst", 10000, "creates per burst of the paired comparison; the filled server first deletes the fill's last as many (--services tells how many it made)")
	flag.StringVar(&cfg.profileDir, "profile-dir", "", "with --compare-with: save a CPU profile of each burst's server, taken while the burst runs, in this directory (filled-pNN.pprof, empty-pNN.pprof)")
	timeout := flag.Duration("timeout", 2*time.Hour, "overall time limit")
	flag.Parse()
	meter, err := procstat.ParsePIDs(pids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale: --pids:", err)
		os.Exit(2)
	}
	cfg.meter = meter
	emptyMeter, err := procstat.ParsePIDs(*comparePIDs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale: --compare-pids:", err)
		os.Exit(2)
	}
	if err := cfg.placeV4(*defaultRange); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	if cfg.v4CIDRs > cfg.cidrs || cfg.cidrs-cfg.v4CIDRs > 65535 || cfg.services <= 0 || cfg.concurrency <= 0 {
		fmt.Fprintln(os.Stderr, "scale: want 0 ≤ --v4-cidrs ≤ --cidrs, at most 65,535 IPv6 ranges, and positive --services and --concurrency")
		os.Exit(2)
	}
	if cfg.pairs <= 0 || cfg.burst <= 0 {
		fmt.Fprintln(os.Stderr, "scale: want positive --pairs and --burst")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *compareWith != "" {
		err = compareServers(ctx, cfg, *compareWith, emptyMeter)
	} else {
		err = run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// newClient is a protobuf client of the server kubeconfig names, unthrottled.
func newClient(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	rc.QPS, rc.Burst = 1e6, 1e6
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(rc)
}

func compareServers(ctx context.Context, cfg config, emptyKubeconfig string, emptyMeter procstat.Meter) error {
	filled, err := newClient(cfg.kubeconfig)
	if err != nil {
		return err
	}
	empty, err := newClient(emptyKubeconfig)
	if err != nil {
		return err
	}
	return compare(ctx, cfg, server{"filled", filled, cfg.meter}, server{"empty", empty, emptyMeter})
}

func run(ctx context.Context, cfg config) error {
	client, err := newClient(cfg.kubeconfig)
	if err != nil {
		return err
	}

	start := time.Now()
	if err := createCIDRs(ctx, client, cfg); err != nil {
		return err
	}
	v4Capacity := cfg.v4Capacity()
	fmt.Printf("%d ServiceCIDRs (%d IPv4 /24, %d IPv6 /112) created in %s; IPv4 space for Services: %d addresses\n",
		cfg.cidrs, cfg.v4CIDRs, cfg.cidrs-cfg.v4CIDRs, time.Since(start).Round(time.Millisecond), v4Capacity)

	const ns = "scale"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace: %w", err)
	}

	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan churnResult, 1)
	go func() { churned <- churn(churnCtx, client, cfg.churn, "churn-", "fd02") }()

	res, err := createServices(ctx, client, ns, cfg, v4Capacity)
	stopChurn()
	ch := <-churned
	if err != nil {
		return err
	}
	if ch.err != nil {
		return fmt.Errorf("ServiceCIDR churn: %w", ch.err)
	}
	fmt.Printf("ServiceCIDRs added and deleted meanwhile: %d added, %d deleted\n", ch.added, ch.deleted)
	report(res, cfg, v4Capacity)
	if err := checkDistinct(res.ips); err != nil {
		return err
	}
	if len(cfg.meter.PIDs) > 0 {
		rss, err := cfg.meter.RSS()
		if err != nil {
			return err
		}
		fmt.Printf("server RSS after the creates: %d MiB\n", rss>>20)
	}
	return nil
}

// createCIDRs makes the ServiceCIDRs with 16 clients: sc-v4-NNNN holds
// the /24 at cfg.v4Base onwards, sc-v6-NNNN fd01::1:0/112 onwards.
func createCIDRs(ctx context.Context, client kubernetes.Interface, cfg config) error {
	return forEach(0, cfg.cidrs, 16, func(i int) error {
		var name, cidr string
		if i < cfg.v4CIDRs {
			name, cidr = fmt.Sprintf("sc-v4-%04d", i), v4CIDR(cfg.v4Base, i).String()
		} else {
			j := i - cfg.v4CIDRs + 1
			name, cidr = fmt.Sprintf("sc-v6-%04d", j), fmt.Sprintf("fd01::%x:0/112", j)
		}
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}
		if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ServiceCIDR %s (%s): %w", name, cidr, err)
		}
		return nil
	})
}

// forEach calls do for each i in [from, to) from workers goroutines and
// returns the first error; once one is returned, no further i is handed out.
func forEach(from, to, workers int, do func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := from; i < to; i++ {
		select {
		case work <- i:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err != nil {
		return err
	}
	return <-errs // nil when closed empty
}

type churnResult struct {
	added, deleted int
	err            error
}

// churn adds an IPv6 /112 ServiceCIDR every interval (named prefix and a
// number, inside the /16 that net names) and deletes the one it added
// before, until ctx ends. A deleted one that holds addresses stays
// terminating, as on kube-apiserver.
func churn(ctx context.Context, client kubernetes.Interface, interval time.Duration, prefix, net string) churnResult {
	var r churnResult
	if interval <= 0 {
		return r
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	prev := ""
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return r
		case <-t.C:
		}
		name := fmt.Sprintf("%s%04d", prefix, n)
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{fmt.Sprintf("%s::%x:0/112", net, n)}}}
		if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			if ctx.Err() == nil {
				r.err = fmt.Errorf("create %s: %w", name, err)
			}
			return r
		}
		r.added++
		if prev != "" {
			if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, prev, metav1.DeleteOptions{}); err != nil {
				if ctx.Err() == nil {
					r.err = fmt.Errorf("delete %s: %w", prev, err)
				}
				return r
			}
			r.deleted++
		}
		prev = name
	}
}

// created is what one create returned.
type created struct {
	ip    netip.Addr
	v6    bool
	lat   time.Duration
	fill  int           // IPv4 Services created, counting it, when it was acknowledged
	at    time.Duration // when it was acknowledged, since the first create was sent
	cpuAt time.Duration // the server's CPU time then
}

type result struct {
	ips     []netip.Addr
	creates []created // in acknowledgement order
	elapsed time.Duration
}

// createServices creates cfg.services Services with cfg.concurrency clients.
func createServices(ctx context.Context, client kubernetes.Interface, ns string, cfg config, v4Capacity int) (*result, error) {
	return createNamed(ctx, client, ns, "s-", cfg.services, cfg, v4Capacity)
}

// createNamed creates n Services named prefix + a six-digit number with
// cfg.concurrency clients, every cfg.v6Every-th IPv6 single-stack.
func createNamed(ctx context.Context, client kubernetes.Interface, ns, prefix string, n int, cfg config, v4Capacity int) (*result, error) {
	var (
		next    atomic.Int64
		v4Done  atomic.Int64
		mu      sync.Mutex
		res     = &result{ips: make([]netip.Addr, 0, n), creates: make([]created, 0, n)}
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range cfg.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				v6 := cfg.v6Every > 0 && i%cfg.v6Every == cfg.v6Every-1
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%06d", prefix, i)},
					Spec: corev1.ServiceSpec{
						Selector: map[string]string{"app": "scale"},
						Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
					},
				}
				if v6 {
					svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				}
				t0 := time.Now()
				out, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				lat := time.Since(t0)
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("create %s: %w", svc.Name, err) })
					return
				}
				ip, err := netip.ParseAddr(out.Spec.ClusterIP)
				if err != nil || ip.Is6() != v6 {
					errOnce.Do(func() { first = fmt.Errorf("%s got ClusterIP %q", svc.Name, out.Spec.ClusterIP) })
					return
				}
				fill := int(v4Done.Load())
				if !v6 {
					fill = int(v4Done.Add(1))
				}
				cpu, _ := cfg.meter.Total()
				mu.Lock()
				res.ips = append(res.ips, ip)
				res.creates = append(res.creates, created{ip: ip, v6: v6, lat: lat, fill: fill, at: time.Since(start), cpuAt: cpu})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(errors.New("out of time"), err)
	}
	if int(v4Done.Load()) > v4Capacity {
		return nil, fmt.Errorf("%d IPv4 Services created, more than the %d addresses counted", v4Done.Load(), v4Capacity)
	}
	return res, nil
}

// report prints one row per tenth of the IPv4 space filled: creates
// acknowledged while the fill was in that tenth, their rate, latency and
// the server's CPU per create.
func report(res *result, cfg config, v4Capacity int) {
	fmt.Printf("%d Services created in %s at %d clients: %.0f/s overall\n",
		len(res.creates), res.elapsed.Round(time.Millisecond), cfg.concurrency, float64(len(res.creates))/res.elapsed.Seconds())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "IPv4 fill\tcreates\tper-sec\tp50-ms\tp99-ms\tcpu-ms/op\t")
	maxFill := 0
	for _, c := range res.creates {
		maxFill = max(maxFill, c.fill)
	}
	var rates []float64 // of the tenths filled whole
	var labels []string // theirs
	for tenth := range 10 {
		lo, hi := v4Capacity*tenth/10, v4Capacity*(tenth+1)/10
		var lats []time.Duration
		var cpu0, cpu1 time.Duration
		firstAt, lastAt := -1, -1
		for k, c := range res.creates {
			if c.fill <= lo || c.fill > hi {
				continue
			}
			if firstAt < 0 {
				firstAt, cpu0 = k, c.cpuAt
			}
			lastAt, cpu1 = k, c.cpuAt
			lats = append(lats, c.lat)
		}
		if len(lats) < 2 {
			continue
		}
		// The rate over the tenth: creates acknowledged (of both families)
		// per second between its first and last acknowledgement.
		span := res.creates[lastAt].at - res.creates[firstAt].at
		rate := float64(lastAt-firstAt) / span.Seconds()
		whole := maxFill >= hi
		label := fmt.Sprintf("%d–%d%%", tenth*10, tenth*10+10)
		if whole {
			rates, labels = append(rates, rate), append(labels, label)
		} else {
			label = fmt.Sprintf("%d–%.1f%%", tenth*10, 100*float64(maxFill)/float64(v4Capacity))
		}
		slices.Sort(lats)
		cpu := "-"
		if len(cfg.meter.PIDs) > 0 {
			cpu = fmt.Sprintf("%.2f", float64((cpu1-cpu0).Microseconds())/1000/float64(lastAt-firstAt))
		}
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.1f\t%.1f\t%s\t\n", label, len(lats), rate,
			ms(lats[len(lats)/2]), ms(lats[len(lats)*99/100]), cpu)
	}
	w.Flush()
	fmt.Printf("IPv4 fill reached: %.1f%% of %d addresses\n", 100*float64(maxFill)/float64(v4Capacity), v4Capacity)
	if len(rates) >= 2 {
		// hack/scale.sh reads the ratio as the last field.
		fmt.Printf("rate in the last whole tenth filled / the first: %s / %s = %.2f\n",
			labels[len(labels)-1], labels[0], rates[len(rates)-1]/rates[0])
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func checkDistinct(ips []netip.Addr) error {
	if ip, dup := firstDuplicate(ips); dup {
		return fmt.Errorf("DUPLICATE: %s given to two Services", ip)
	}
	fmt.Printf("%d Services, %d distinct ClusterIPs\n", len(ips), len(ips))
	return nil
}

// firstDuplicate returns the first address of ips that an earlier one
// repeats.
func firstDuplicate(ips []netip.Addr) (netip.Addr, bool) {
	seen := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		if seen[ip] {
			return ip, true
		}
		seen[ip] = true
	}
	return netip.Addr{}, false
}
