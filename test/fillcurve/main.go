// Command fillcurve fills a service range through the API with one client,
// creating Services one after another, and prints the create latency per 10%
// of fill: the curve that shows whether allocation cost grows with the number
// of IPs in use (upstream kube-apiserver 1.36's does: 8.7 ms mean for the
// first 50 creates of a /18, 70 ms for the last 50). hack/fill-curve.sh runs it
// against a fresh `allocator serve`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the server")
	count := flag.Int("count", 0, "Services to create (the free addresses of the range)")
	namespace := flag.String("namespace", "default", "namespace of the Services")
	flag.Parse()
	if err := run(*kubeconfig, *count, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "fillcurve:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, count int, namespace string) error {
	if count <= 0 {
		return fmt.Errorf("--count must be positive")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	latencies := make([]time.Duration, 0, count)
	ips := make(map[string]bool, count)
	start := time.Now()
	for i := range count {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%06d", i)},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		t0 := time.Now()
		created, err := client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create %d of %d: %w", i+1, count, err)
		}
		latencies = append(latencies, time.Since(t0))
		if ips[created.Spec.ClusterIP] {
			return fmt.Errorf("%s handed out twice", created.Spec.ClusterIP)
		}
		ips[created.Spec.ClusterIP] = true
	}
	total := time.Since(start)

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fill\tcreates\tmean\tp50\tp99\t")
	var firstP99, lastP99 time.Duration
	for b := range 10 {
		lo, hi := b*count/10, (b+1)*count/10
		part := slices.Clone(latencies[lo:hi])
		slices.Sort(part)
		var sum time.Duration
		for _, d := range part {
			sum += d
		}
		p99 := quantile(part, 0.99)
		if b == 0 {
			firstP99 = p99
		}
		lastP99 = p99
		fmt.Fprintf(tw, "%d-%d%%\t%d\t%s\t%s\t%s\t\n", b*10, (b+1)*10, len(part),
			ms(sum/time.Duration(max(len(part), 1))), ms(quantile(part, 0.5)), ms(p99))
	}
	tw.Flush()
	edge := func(part []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range part {
			sum += d
		}
		return sum / time.Duration(max(len(part), 1))
	}
	n := min(50, count)
	fmt.Printf("%d Services in %v (%.0f/s); mean of the first %d creates %s, of the last %d %s; p99 90-100%% / p99 0-10%% = %.2f; all %d IPs distinct\n",
		count, total.Round(time.Millisecond), float64(count)/total.Seconds(), n, ms(edge(latencies[:n])), n, ms(edge(latencies[count-n:])),
		float64(lastP99)/float64(max(firstP99, 1)), len(ips))
	return nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
