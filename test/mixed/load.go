package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// ack is one create a server acknowledged.
type ack struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Server    string   `json:"server"`
	IPs       []string `json:"ips"`
	NodePorts []int32  `json:"nodePorts,omitempty"`
}

// maxAttempts bounds the retries of one create.
const maxAttempts = 10

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	servers := fs.String("servers", "", "name=kubeconfig,... of the API servers to load")
	namespace := fs.String("namespace", "default", "namespace of the Services")
	prefix := fs.String("prefix", "mixed", "name prefix of the Services")
	clients := fs.Int("clients", 32, "concurrent clients, split evenly across the servers")
	perServer := fs.Int("creates", 1000, "creates through each server")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit of the whole load")
	out := fs.String("acks", "", "file to write the acknowledged creates to (JSON lines)")
	scenario := fs.String("scenario", "", "scenario name for the summary")
	svcType := fs.String("type", "ClusterIP", "type of the Services: ClusterIP, or NodePort (two ports each: 53/TCP and 53/UDP share one nodePort, 80/TCP gets another)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *svcType != string(corev1.ServiceTypeClusterIP) && *svcType != string(corev1.ServiceTypeNodePort) {
		return fmt.Errorf("--type %q: want ClusterIP or NodePort", *svcType)
	}
	targets, err := parseTargets(*servers)
	if err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--acks is required")
	}
	ctx, cancel := withTimeout(*timeout)
	defer cancel()

	var (
		mu      sync.Mutex
		acks    []ack
		retries atomic.Int64
		failed  atomic.Int64
		firstEr atomic.Value
		wg      sync.WaitGroup
	)
	start := time.Now()
	perClient := max(1, *clients/len(targets))
	for _, tg := range targets {
		jobs := make(chan int, *perServer)
		for i := range *perServer {
			jobs <- i
		}
		close(jobs)
		for range perClient {
			wg.Go(func() {
				for i := range jobs {
					name := fmt.Sprintf("%s-%s-%05d", *prefix, tg.name, i)
					got, n, err := createOne(ctx, tg.client, *namespace, name, corev1.ServiceType(*svcType))
					retries.Add(int64(n))
					if err != nil {
						failed.Add(1)
						firstEr.CompareAndSwap(nil, fmt.Sprintf("%s via %s: %v", name, tg.name, err))
						continue
					}
					mu.Lock()
					acks = append(acks, ack{Namespace: *namespace, Name: name, Server: tg.name, IPs: got.IPs, NodePorts: got.NodePorts})
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)

	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("acks file: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, a := range acks {
		if err := enc.Encode(a); err != nil {
			f.Close()
			return fmt.Errorf("write acks: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write acks: %w", err)
	}
	perServerAcks := map[string]int{}
	for _, a := range acks {
		perServerAcks[a.Server]++
	}
	summary := map[string]any{
		"phase": "load", "scenario": *scenario, "type": *svcType, "clients": perClient * len(targets), "creates_per_server": *perServer,
		"acknowledged": len(acks), "acknowledged_per_server": perServerAcks, "failed": failed.Load(),
		"retries": retries.Load(), "seconds": round(elapsed.Seconds()), "creates_per_second": round(float64(len(acks)) / elapsed.Seconds()),
	}
	if e := firstEr.Load(); e != nil {
		summary["first_error"] = e
	}
	return json.NewEncoder(os.Stdout).Encode(summary)
}

func round(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// createOne creates a Service of type t and returns what it got and the
// number of retries. It retries only what may succeed on a second try:
// conflicts, server errors, timeouts and throttling. After an ambiguous
// failure the create may have landed: AlreadyExists then reads the stored
// Service back.
func createOne(ctx context.Context, c kubernetes.Interface, namespace, name string, t corev1.ServiceType) (allocated, int, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:  t,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if t == corev1.ServiceTypeNodePort {
		svc.Spec.Ports = append(svc.Spec.Ports,
			corev1.ServicePort{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "dns-udp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP})
	}
	var lastErr error
	for attempt := range maxAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return allocated{}, attempt, fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
		got, err := c.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
		if err == nil {
			return allocatedOf(got), attempt, nil
		}
		if apierrors.IsAlreadyExists(err) && attempt > 0 {
			// An earlier attempt landed without its answer reaching us.
			got, gerr := c.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
			if gerr != nil {
				return allocated{}, attempt, fmt.Errorf("read back after AlreadyExists: %w", gerr)
			}
			return allocatedOf(got), attempt, nil
		}
		if !retriable(err) {
			return allocated{}, attempt, err
		}
		lastErr = err
	}
	return allocated{}, maxAttempts, fmt.Errorf("%d attempts: %w", maxAttempts, lastErr)
}

// allocated is what a Service got: its cluster IPs and its ports' nodePorts
// (in port order, 0 for none).
type allocated struct {
	IPs       []string
	NodePorts []int32
}

func allocatedOf(svc *corev1.Service) allocated {
	a := allocated{IPs: svc.Spec.ClusterIPs}
	if len(a.IPs) == 0 && svc.Spec.ClusterIP != "" {
		a.IPs = []string{svc.Spec.ClusterIP}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			a.NodePorts = append(a.NodePorts, p.NodePort)
		}
	}
	return a
}

func retriable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return apierrors.IsConflict(err) || code >= 500 || apierrors.IsTooManyRequests(err) ||
			apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}
	// Transport errors (connection reset, client timeout): ambiguous.
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
