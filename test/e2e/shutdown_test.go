package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestSIGTERMDuringDeletes stops a replica with SIGTERM while deletes are
// in flight and reads etcd right after it exits, before any repair: every
// cluster IP (bit or IPAddress) and node port still held belongs to a
// Service still stored: the releases of deletes in flight must not depend
// on the server's own API, which has stopped serving by then.
func TestSIGTERMDuringDeletes(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, model := range []string{"bitmap", "ipaddress"} {
		t.Run(model, func(t *testing.T) {
			const rng = "10.0.0.0/16"
			etcd := etcdtest.New(t)
			f := newFleet(t, bin, etcd, 1, "--service-cluster-ip-range", rng)
			r := f.replicas[0]
			ep := f.start(r, model)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			svcs := ep.client.CoreV1().Services("default")

			const n = 160
			names := make(chan string, n)
			for i := range n {
				names <- fmt.Sprintf("s%03d", i)
			}
			close(names)
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for name := range names {
						svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
							Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
						if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
							t.Errorf("create %s: %v", name, err)
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}

			// Delete them all from 16 clients; SIGTERM once 20 have returned.
			var deleted atomic.Int32
			todo := make(chan string, n)
			for i := range n {
				todo <- fmt.Sprintf("s%03d", i)
			}
			close(todo)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for name := range todo {
						if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
							deleted.Add(1)
						}
					}
				}()
			}
			deadline := time.Now().Add(30 * time.Second)
			for deleted.Load() < 20 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			f.stop(r, syscall.SIGTERM)
			t.Logf("%d deletes answered when SIGTERM was sent; the process exited %s later", deleted.Load(), time.Since(start).Round(time.Millisecond))
			wg.Wait()

			leaks := heldWithoutService(t, ctx, etcd.Client(), model, rng)
			if len(leaks) > 0 {
				t.Errorf("held right after the replica exited, with no Service stored: %v", leaks)
			}
		})
	}
}

// heldWithoutService reads etcd and returns every cluster IP and node port
// held (bits, IPAddresses) that no stored Service has.
func heldWithoutService(t *testing.T, ctx context.Context, etcd *clientv3.Client, m, rng string) []string {
	t.Helper()
	l := etcdlayout.Layout{Prefix: "/registry"}
	resp, err := etcd.Get(ctx, l.ServicesPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	ips, ports := map[string]bool{}, map[int]bool{}
	for _, kv := range resp.Kvs {
		svc, err := etcdlayout.DecodeService(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range svc.Spec.ClusterIPs {
			ips[ip] = true
		}
		for _, p := range svc.Spec.Ports {
			ports[int(p.NodePort)] = true
		}
	}
	var leaks []string
	if m == "bitmap" {
		r, err := subrange.New(netip.MustParsePrefix(rng), model.Bitmap)
		if err != nil {
			t.Fatal(err)
		}
		a, err := clusterip.NewEtcdAllocator(etcd, l.PrimaryServiceIPRange(), r, bitmap.EtcdOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.ForEach(ctx, func(ip netip.Addr) {
			if !ips[ip.String()] {
				leaks = append(leaks, "bit "+ip.String())
			}
		}); err != nil {
			t.Fatal(err)
		}
	} else {
		resp, err := etcd.Get(ctx, l.IPAddressesPrefix(), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			ipa, err := etcdlayout.DecodeIPAddress(kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			if !ips[ipa.Name] {
				leaks = append(leaks, "IPAddress "+ipa.Name)
			}
		}
	}
	pa, err := nodeport.NewEtcd(etcd, l.ServiceNodePortRange(), nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.ForEach(ctx, func(p int) {
		if !ports[p] {
			leaks = append(leaks, fmt.Sprintf("node port %d", p))
		}
	}); err != nil {
		t.Fatal(err)
	}
	return leaks
}
