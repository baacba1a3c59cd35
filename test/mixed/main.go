// Command mixed loads several API servers that share one etcd (ours and a
// real kube-apiserver, hack/kube-apiserver-mixed.sh) with concurrent Service
// creates, then checks the invariants that must hold whatever the allocator
// models: no ClusterIP held by two Services, every acknowledged create
// stored with the IP it was acknowledged with, every Service IP held by an
// IPAddress whose parentRef is that Service, and, when a RangeAllocation
// exists, its bit set.
//
// `mixed load` runs the creates and writes what was acknowledged to a file;
// `mixed check` reads that file back after the caller ran a repair pass. Each
// prints a one-line JSON summary; check exits 1 when an invariant is violated.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mixed load|check [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = runLoad(os.Args[2:])
	case "check":
		var ok bool
		ok, err = runCheck(os.Args[2:])
		if err == nil && !ok {
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mixed:", err)
		os.Exit(2)
	}
}

// target is one API server: a name for the report and its client.
type target struct {
	name   string
	client kubernetes.Interface
}

// parseTargets reads "name=kubeconfig,name=kubeconfig".
func parseTargets(spec string) ([]target, error) {
	var out []target
	for _, field := range strings.Split(spec, ",") {
		name, path, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("--servers: want name=kubeconfig, got %q", field)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig of %s: %w", name, err)
		}
		cfg.QPS, cfg.Burst = 1e6, 1e6
		cfg.Timeout = 30 * time.Second
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("client of %s: %w", name, err)
		}
		out = append(out, target{name: name, client: client})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--servers is empty")
	}
	return out, nil
}

func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
