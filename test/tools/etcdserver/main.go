// Command etcdserver runs one etcd member on plain-http loopback for the
// hack/ scripts that put a real kube-apiserver and our server on one etcd.
//
// It binds only 127.0.0.1 (no TLS, no auth: anything that reaches it can
// rewrite the registry, so it must never listen on a network interface),
// keeps its data in a fresh temporary directory unless --data-dir is given
// (a temporary one is removed on exit), prints "ready <client URL>" on stdout
// once the member serves, and stops cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdserver:", err)
		os.Exit(1)
	}
}

func run() error {
	clientPort := flag.Int("client-port", 0, "client port on 127.0.0.1 (0: a free one)")
	peerPort := flag.Int("peer-port", 0, "peer port on 127.0.0.1 (0: a free one)")
	dataDir := flag.String("data-dir", "", "data directory (default: a temporary one, removed on exit)")
	startTimeout := flag.Duration("start-timeout", time.Minute, "how long to wait for the member to serve")
	flag.Parse()

	if *dataDir == "" {
		dir, err := os.MkdirTemp("", "etcdserver-")
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		defer os.RemoveAll(dir)
		*dataDir = dir
	}
	cport, err := portOrFree(*clientPort)
	if err != nil {
		return err
	}
	pport, err := portOrFree(*peerPort)
	if err != nil {
		return err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))}

	cfg := embed.NewConfig()
	cfg.Name = "harness"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "allocator-harness"
	cfg.LogLevel = "error"
	// Two API servers write hard here; a crash loses only a throwaway test store.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(*startTimeout):
		return fmt.Errorf("etcd not ready after %s", *startTimeout)
	}
	fmt.Printf("ready %s\n", clientURL.String())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

// portOrFree returns port, or a free loopback port when it is 0.
func portOrFree(port int) (int, error) {
	if port != 0 {
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
