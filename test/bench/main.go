// Command bench creates and deletes ClusterIP Services against an API server
// with client-go at several concurrency levels, and prints throughput and
// latency percentiles per phase. It fails when two Services got the same IP.
// hack/bench.sh runs it against a freshly started `allocator serve`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/procstat"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	count := flag.Int("count", 2000, "Services per phase")
	levels := flag.String("concurrency", "1,8,32", "comma-separated client concurrency levels")
	timeout := flag.Duration("timeout", 30*time.Minute, "overall time limit")
	svcType := flag.String("type", "ClusterIP", "Service type to create: ClusterIP or NodePort (a NodePort Service costs a ClusterIP and a node port, two maps)")
	pids := flag.String("pids", "", "comma-separated pids of the server's processes (etcd included) whose CPU per operation is reported")
	nsLabels := flag.String("namespace-labels", "", "labels of the namespaces the benchmark creates, as k=v,k=v (to put its Services in a ServiceCIDR scope)")
	sidePids := flag.String("side-pids", "", "comma-separated pids of helper processes (e.g. kube-controller-manager beside a kube-apiserver) whose CPU per operation is reported in a column of its own, not in cpu-ms/op")
	cpuProfile := flag.String("cpu-profile", "", "write a CPU profile of the server (its /debug/pprof/profile) taken during the first create phase to this file, and print the creates completed while it ran")
	cpuProfileSeconds := flag.Int("cpu-profile-seconds", 5, "length of the --cpu-profile (the phase must last longer: raise --count)")
	cpuProfileAfter := flag.Duration("cpu-profile-after", time.Second, "how long into the create phase the --cpu-profile starts")
	flag.Parse()
	var m meters
	m.profile = profileRequest{file: *cpuProfile, seconds: *cpuProfileSeconds, after: *cpuProfileAfter}
	var err error
	if m.server, err = procstat.ParsePIDs(*pids); err != nil {
		fmt.Fprintln(os.Stderr, "bench: --pids:", err)
		os.Exit(2)
	}
	if m.side, err = procstat.ParsePIDs(*sidePids); err != nil {
		fmt.Fprintln(os.Stderr, "bench: --side-pids:", err)
		os.Exit(2)
	}
	nsLabelMap, err := labels.ConvertSelectorToLabelsMap(*nsLabels)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: --namespace-labels:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, m, *kubeconfig, *count, *levels, corev1.ServiceType(*svcType), nsLabelMap); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// meters are the processes whose CPU a phase reports: the server's, and
// helpers' apart (side), so that cpu-ms/op means the same for every server;
// and the server's CPU profile, when one is asked for.
type meters struct {
	server, side procstat.Meter
	profile      profileRequest
}

func run(ctx context.Context, meter meters, kubeconfig string, count int, levels string, svcType corev1.ServiceType, nsLabels map[string]string) error {
	if svcType != corev1.ServiceTypeClusterIP && svcType != corev1.ServiceTypeNodePort {
		return fmt.Errorf("--type %q: want ClusterIP or NodePort", svcType)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	fmt.Printf("%-8s %-11s %7s %10s %9s %9s %9s %11s", "phase", "concurrency", "count", "per-sec", "p50-ms", "p99-ms", "max-ms", "cpu-ms/op")
	if len(meter.side.PIDs) > 0 {
		fmt.Printf(" %16s", "side-cpu-ms/op")
	}
	fmt.Println()
	for _, field := range strings.Split(levels, ",") {
		conc, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || conc < 1 {
			return fmt.Errorf("bad concurrency %q", field)
		}
		ns := fmt.Sprintf("bench-c%d-%d", conc, time.Now().UnixNano()%1e6)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: nsLabels}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace: %w", err)
		}
		ips := make([]string, count)
		nodePorts := make([]int32, count)
		create := func(ctx context.Context, i int) error {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i)},
				Spec: corev1.ServiceSpec{
					Type:     svcType,
					Selector: map[string]string{"app": "bench"},
					Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
				},
			}
			out, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			ips[i] = out.Spec.ClusterIP
			nodePorts[i] = out.Spec.Ports[0].NodePort
			return nil
		}
		profiler := meter.profile.during(client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile"))
		meter.profile = profileRequest{} // the first create phase only
		if err := phase(ctx, meter, "create", conc, count, create, profiler); err != nil {
			return err
		}
		seen := make(map[string]int, count)
		for i, ip := range ips {
			if j, dup := seen[ip]; dup {
				return fmt.Errorf("svc-%05d and svc-%05d both got %s", j, i, ip)
			}
			seen[ip] = i
		}
		if svcType == corev1.ServiceTypeNodePort {
			byPort := make(map[int32]int, count)
			for i, p := range nodePorts {
				if j, dup := byPort[p]; dup || p == 0 {
					return fmt.Errorf("svc-%05d and svc-%05d both got nodePort %d", j, i, p)
				}
				byPort[p] = i
			}
		}
		del := func(ctx context.Context, i int) error {
			return client.CoreV1().Services(ns).Delete(ctx, fmt.Sprintf("svc-%05d", i), metav1.DeleteOptions{})
		}
		if err := phase(ctx, meter, "delete", conc, count, del, nil); err != nil {
			return err
		}
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}
	if svcType == corev1.ServiceTypeNodePort {
		fmt.Println("all Services got distinct IPs and distinct node ports")
		return nil
	}
	fmt.Println("all Services got distinct IPs")
	return nil
}

// phase runs op for 0..count-1 with conc workers and prints its figures;
// profiler, when not nil, runs beside it with the count of ops completed.
func phase(ctx context.Context, meter meters, name string, conc, count int, op func(context.Context, int) error, profiler func(ctx context.Context, done *atomic.Int64, count int) error) error {
	lat := make([]time.Duration, count)
	var done atomic.Int64
	next := make(chan int)
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	cpu0, err := meter.server.Total()
	if err != nil {
		return err
	}
	side0, err := meter.side.Total()
	if err != nil {
		return err
	}
	start := time.Now()
	profiled := make(chan error, 1)
	if profiler != nil {
		go func() { profiled <- profiler(ctx, &done, count) }()
	} else {
		profiled <- nil
	}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if err := op(ctx, i); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("%s %d: %w", name, i, err) })
					continue
				}
				lat[i] = time.Since(t0)
				done.Add(1)
			}
		}()
	}
	for i := 0; i < count && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return first
	}
	if err := <-profiled; err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.Join(errors.New(name+": out of time"), ctx.Err())
	}
	cpu1, err := meter.server.Total()
	if err != nil {
		return err
	}
	side1, err := meter.side.Total()
	if err != nil {
		return err
	}
	perOp := func(d time.Duration) string {
		return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000/float64(count))
	}
	cpuPerOp := "-"
	if len(meter.server.PIDs) > 0 {
		cpuPerOp = perOp(cpu1 - cpu0)
	}
	slices.Sort(lat)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
	fmt.Printf("%-8s %-11d %7d %10.1f %9s %9s %9s %11s", name, conc, count, float64(count)/elapsed.Seconds(),
		ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]), cpuPerOp)
	if len(meter.side.PIDs) > 0 {
		fmt.Printf(" %16s", perOp(side1-side0))
	}
	fmt.Println()
	return nil
}

// profileRequest asks for a CPU profile of the server during a create phase.
type profileRequest struct {
	file    string // "": none
	seconds int
	after   time.Duration // into the phase
}

// during returns the profiler of a phase (nil when no profile is asked for):
// p.after into the phase, it takes a profile of the server through req and
// writes it to p.file, and
// prints how many ops completed while the profile ran, so that the
// profile's samples can be divided per op.
func (p profileRequest) during(req *rest.Request) func(context.Context, *atomic.Int64, int) error {
	if p.file == "" {
		return nil
	}
	return func(ctx context.Context, done *atomic.Int64, count int) error {
		select {
		case <-time.After(p.after):
		case <-ctx.Done():
			return ctx.Err()
		}
		n0 := done.Load()
		raw, err := req.Param("seconds", strconv.Itoa(p.seconds)).DoRaw(ctx)
		n1 := done.Load()
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := os.WriteFile(p.file, raw, 0o644); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if n1 == int64(count) {
			return fmt.Errorf("cpu profile: the phase ended before its %d s: raise --count", p.seconds)
		}
		fmt.Printf("cpu profile %s: %d ops completed in its %d s\n", p.file, n1-n0, p.seconds)
		return nil
	}
}
