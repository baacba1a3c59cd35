// Command embeddedetcd runs, as a process of its own, the etcd member that
// `allocator serve` embeds, configured as serve configures it: internal/embedetcd
// with fsync on, on loopback, TLS with a client certificate required (the
// PKI of embedetcd.EnsurePKI). The benchmark scripts put a real
// kube-apiserver on it, so that kube-apiserver and our server are measured
// on the same etcd: test/tools/etcdserver, which the parity scripts use, is
// plain http without fsync, which would spare kube-apiserver's side the
// costs ours pays.
//
// It prints "ready <client URL>" on stdout once the member serves; the
// certificates a client needs are <data-dir>/pki/ca.crt, client.crt and
// client.key. It stops cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/allocator/allocator/internal/embedetcd"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the member's data (etcd/) and certificates (pki/); required")
	flag.Parse()
	if err := run(*dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "embeddedetcd:", err)
		os.Exit(1)
	}
}

func run(dataDir string) error {
	if dataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pki, err := embedetcd.EnsurePKI(filepath.Join(dataDir, "pki"))
	if err != nil {
		return err
	}
	server, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(dataDir, "etcd"), PKI: &pki})
	if err != nil {
		return err
	}
	defer server.Close()
	fmt.Printf("ready %s\n", server.Endpoints()[0])
	select {
	case <-ctx.Done():
		return nil
	case err := <-server.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}
