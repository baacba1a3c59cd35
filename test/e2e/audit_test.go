package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/bitmap/clusterip"

	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/subrange"
)

// claimAudit is what etcd holds, read directly with no server in between:
// the stored Services, and whether the records of the model (bits of the
// RangeAllocation, or IPAddress objects) and the node-port map agree with
// them.
type claimAudit struct {
	// stored maps a Service's "namespace/name" to what it holds.
	stored map[string]heldBy
	// dupIPs and dupPorts: a ClusterIP or node port stored for two Services.
	dupIPs, dupPorts []string
	// leaks: a bit, IPAddress or node port held with no Service holding it.
	leaks []string
	// missing: a Service's ClusterIP or node port not held by its record (no
	// bit; no IPAddress, or one whose parentRef names another Service).
	missing []string
}

// heldBy is what one stored Service holds.
type heldBy struct {
	ip        netip.Addr
	nodePorts []int32
}

func (a claimAudit) String() string {
	return fmt.Sprintf("%d Services stored; %d ClusterIPs and %d node ports stored twice; %d leaked records, %d missing",
		len(a.stored), len(a.dupIPs), len(a.dupPorts), len(a.leaks), len(a.missing))
}

// auditClaims reads the Services, the model's records and the node-port map
// from etcd (prefix /registry, single-stack rng, the default node-port range).
func auditClaims(t *testing.T, ctx context.Context, etcd *clientv3.Client, m, rng string) claimAudit {
	t.Helper()
	l := etcdlayout.Layout{Prefix: "/registry"}
	a := claimAudit{stored: map[string]heldBy{}}
	resp, err := etcd.Get(ctx, l.ServicesPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read Services: %v", err)
	}
	ipOwners, portOwners := map[netip.Addr][]string{}, map[int32][]string{}
	for _, kv := range resp.Kvs {
		svc, err := etcdlayout.DecodeService(kv.Value)
		if err != nil {
			t.Fatalf("decode %s: %v", kv.Key, err)
		}
		name := svc.Namespace + "/" + svc.Name
		var h heldBy
		for i, text := range svc.Spec.ClusterIPs {
			ip, err := netip.ParseAddr(text)
			if err != nil {
				continue // headless ("None") or ExternalName
			}
			if i == 0 {
				h.ip = ip
			}
			ipOwners[ip] = append(ipOwners[ip], name)
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 && !slices.Contains(h.nodePorts, p.NodePort) {
				h.nodePorts = append(h.nodePorts, p.NodePort)
				portOwners[p.NodePort] = append(portOwners[p.NodePort], name)
			}
		}
		a.stored[name] = h
	}
	for ip, names := range ipOwners {
		if len(names) > 1 {
			a.dupIPs = append(a.dupIPs, fmt.Sprintf("%s: %s", ip, strings.Join(names, " ")))
		}
	}
	for port, names := range portOwners {
		if len(names) > 1 {
			a.dupPorts = append(a.dupPorts, fmt.Sprintf("%d: %s", port, strings.Join(names, " ")))
		}
	}
	a.leaks = heldWithoutService(t, ctx, etcd, m, rng)

	// What each Service holds must be held for it.
	ports, err := nodeport.NewEtcd(etcd, l.ServiceNodePortRange(), nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	portBits := map[int32]bool{}
	if err := ports.ForEach(ctx, func(p int) { portBits[int32(p)] = true }); err != nil {
		t.Fatalf("read the node-port map: %v", err)
	}
	ipHolder := map[netip.Addr]string{} // address → "namespace/name" its record is for ("" = a bit)
	if m == "bitmap" {
		r, err := subrange.New(netip.MustParsePrefix(rng), model.Bitmap)
		if err != nil {
			t.Fatal(err)
		}
		bits, err := clusterip.NewEtcdAllocator(etcd, l.PrimaryServiceIPRange(), r, bitmap.EtcdOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := bits.ForEach(ctx, func(ip netip.Addr) { ipHolder[ip] = "" }); err != nil {
			t.Fatalf("read the bitmap: %v", err)
		}
	} else {
		resp, err := etcd.Get(ctx, l.IPAddressesPrefix(), clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("read IPAddresses: %v", err)
		}
		for _, kv := range resp.Kvs {
			o, err := etcdlayout.DecodeIPAddress(kv.Value)
			if err != nil {
				t.Fatalf("decode %s: %v", kv.Key, err)
			}
			ip, err := netip.ParseAddr(o.Name)
			if err != nil {
				continue
			}
			owner := "?"
			if ref := o.Spec.ParentRef; ref != nil && ref.Group == "" && ref.Resource == "services" {
				owner = ref.Namespace + "/" + ref.Name
			}
			ipHolder[ip] = owner
		}
	}
	for name, h := range a.stored {
		if h.ip.IsValid() {
			owner, ok := ipHolder[h.ip]
			switch {
			case !ok:
				a.missing = append(a.missing, fmt.Sprintf("%s %s: not held", name, h.ip))
			case m != "bitmap" && owner != name:
				a.missing = append(a.missing, fmt.Sprintf("%s %s: its IPAddress is for %s", name, h.ip, owner))
			}
		}
		for _, p := range h.nodePorts {
			if !portBits[p] {
				a.missing = append(a.missing, fmt.Sprintf("%s node port %d: not held", name, p))
			}
		}
	}
	slices.Sort(a.dupIPs)
	slices.Sort(a.dupPorts)
	slices.Sort(a.leaks)
	slices.Sort(a.missing)
	return a
}
