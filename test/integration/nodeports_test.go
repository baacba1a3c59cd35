package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/fixtures"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"

	"github.com/allocator/allocator/pkg/bitmap"
)

const nodePortKey = "/registry/ranges/servicenodeports"

// heldPorts lists the ports the stored node-port map holds, read from etcd.
func heldPorts(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd) []int {
	t.Helper()
	a, err := nodeport.NewEtcd(etcd.Client(), nodePortKey, nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	if err := a.ForEach(ctx, func(p int) { held = append(held, p) }); err != nil {
		t.Fatalf("read the node-port map: %v", err)
	}
	return held
}

// expectHeld checks the stored map holds exactly want.
func expectHeld(t *testing.T, ctx context.Context, etcd *etcdtest.Etcd, want ...int) {
	t.Helper()
	slices.Sort(want)
	if got := heldPorts(t, ctx, etcd); !slices.Equal(got, want) {
		t.Fatalf("node-port map holds %v, want %v", got, want)
	}
}

func nodePortService(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	return newService(name, func(s *corev1.Service) {
		s.Spec.Type = typ
		if len(ports) > 0 {
			s.Spec.Ports = ports
		}
	})
}

func tcp(port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: fmt.Sprintf("tcp-%d", port), Port: port, Protocol: corev1.ProtocolTCP, NodePort: nodePort}
}

func update(t *testing.T, ctx context.Context, c kubernetes.Interface, name string, mutate func(*corev1.Service)) *corev1.Service {
	t.Helper()
	out, err := updateErr(ctx, c, name, mutate)
	if err != nil {
		t.Fatalf("update %s: %v", name, err)
	}
	return out
}

// updateErr reads Service default/name, applies mutate and writes it back.
func updateErr(ctx context.Context, c kubernetes.Interface, name string, mutate func(*corev1.Service)) (*corev1.Service, error) {
	svc, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	mutate(svc)
	return c.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{})
}

// TestNodePortMapAtStartup: in both IP models the server creates the
// node-port map at start-up, byte for byte what kube-apiserver writes.
func TestNodePortMapAtStartup(t *testing.T) {
	t.Parallel()
	forEachModel(t, testNodePortMapAtStartup)
}

func testNodePortMapAtStartup(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16"})
	ctx := testContext(t)
	resp, err := s.etcd.Client().Get(ctx, nodePortKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d keys)", nodePortKey, err, len(resp.Kvs))
	}
	want, _ := fixtures.Load(t, fixtures.IPAddress136).Value(nodePortKey)
	if !bytes.Equal(resp.Kvs[0].Value, want) {
		t.Errorf("stored %q, kube-apiserver writes %q", resp.Kvs[0].Value, want)
	}
	mustCreate(t, ctx, s.client, nodePortService("np", corev1.ServiceTypeNodePort, tcp(80, 30080)))
	expectHeld(t, ctx, s.etcd, 30080)
}

func TestNodePorts(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{serviceRange: "10.96.0.0/16"})
	ctx := testContext(t)
	c := s.client

	t.Run("errors carry upstream's texts", func(t *testing.T) {
		mustCreate(t, ctx, c, nodePortService("np-a", corev1.ServiceTypeNodePort, tcp(80, 30080)))
		_, err := create(ctx, c, nodePortService("np-b", corev1.ServiceTypeNodePort, tcp(81, 30080)))
		expectStatus(t, err, 422, `Service "np-b" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`)
		_, err = create(ctx, c, nodePortService("np-c", corev1.ServiceTypeNodePort, tcp(82, 20000)))
		expectStatus(t, err, 422, `Service "np-c" is invalid: spec.ports[0].nodePort: Invalid value: 20000: provided port is not in the valid range. The range of valid ports is 30000-32767`)
		_, err = create(ctx, c, nodePortService("np-d", corev1.ServiceTypeClusterIP, tcp(83, 30083)))
		expectStatus(t, err, 422, "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'")
		// Two TCP ports on one nodePort: upstream's answer (it reserves the
		// second before it validates), nothing reserved.
		_, err = create(ctx, c, nodePortService("np-e", corev1.ServiceTypeNodePort, tcp(84, 30084), tcp(85, 30084)))
		expectStatus(t, err, 422, "spec.ports[1].nodePort: Invalid value: 30084: provided port is already allocated")
		expectHeld(t, ctx, s.etcd, 30080)
		mustDelete(t, ctx, c, "np-a")
		expectHeld(t, ctx, s.etcd)
	})

	t.Run("a failed create leaks no port and no IP", func(t *testing.T) {
		mustCreate(t, ctx, c, nodePortService("holder", corev1.ServiceTypeNodePort, tcp(80, 30080)))
		_, err := create(ctx, c, nodePortService("fails", corev1.ServiceTypeNodePort, tcp(81, 30100), tcp(82, 0), tcp(83, 30080)))
		expectStatus(t, err, 422, "spec.ports[2].nodePort: Invalid value: 30080: provided port is already allocated")
		expectHeld(t, ctx, s.etcd, 30080)
		_, err = create(ctx, c, nodePortService("fails-ip", corev1.ServiceTypeNodePort, tcp(81, 30101)))
		if err != nil {
			t.Fatal(err)
		}
		mustDelete(t, ctx, c, "fails-ip")
		mustDelete(t, ctx, c, "holder")
		expectHeld(t, ctx, s.etcd)
	})

	t.Run("TCP and UDP of one port share a nodePort", func(t *testing.T) {
		svc := mustCreate(t, ctx, c, nodePortService("dns", corev1.ServiceTypeNodePort,
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP},
			corev1.ServicePort{Name: "other", Port: 54, Protocol: corev1.ProtocolUDP}))
		p := svc.Spec.Ports
		if p[0].NodePort == 0 || p[0].NodePort != p[1].NodePort || p[2].NodePort == p[0].NodePort || p[2].NodePort == 0 {
			t.Fatalf("nodePorts %d %d %d: want 53/TCP and 53/UDP to share one, 54 its own", p[0].NodePort, p[1].NodePort, p[2].NodePort)
		}
		for _, np := range []int32{p[0].NodePort, p[2].NodePort} {
			if np < 30086 {
				t.Errorf("dynamic nodePort %d is in the static band 30000-30085", np)
			}
		}
		expectHeld(t, ctx, s.etcd, int(p[0].NodePort), int(p[2].NodePort))
		// Requested on UDP only: TCP takes the same.
		svc = mustCreate(t, ctx, c, nodePortService("dns2", corev1.ServiceTypeNodePort,
			corev1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053}))
		if svc.Spec.Ports[0].NodePort != 30053 || svc.Spec.Ports[1].NodePort != 30053 {
			t.Errorf("nodePorts %v, want 30053 for both", svc.Spec.Ports)
		}
		mustDelete(t, ctx, c, "dns")
		mustDelete(t, ctx, c, "dns2")
		expectHeld(t, ctx, s.etcd)
	})

	t.Run("health check port and allocateLoadBalancerNodePorts false", func(t *testing.T) {
		lb := nodePortService("lb-local", corev1.ServiceTypeLoadBalancer)
		lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		lb = mustCreate(t, ctx, c, lb)
		hc, np := lb.Spec.HealthCheckNodePort, lb.Spec.Ports[0].NodePort
		if hc == 0 || np == 0 || hc == np {
			t.Fatalf("healthCheckNodePort %d, nodePort %d", hc, np)
		}
		if lb.Spec.AllocateLoadBalancerNodePorts == nil || !*lb.Spec.AllocateLoadBalancerNodePorts {
			t.Errorf("allocateLoadBalancerNodePorts not defaulted to true: %v", lb.Spec.AllocateLoadBalancerNodePorts)
		}
		expectHeld(t, ctx, s.etcd, int(hc), int(np))

		no := false
		bare := nodePortService("lb-bare", corev1.ServiceTypeLoadBalancer, tcp(80, 0), tcp(81, 30081))
		bare.Spec.AllocateLoadBalancerNodePorts = &no
		bare = mustCreate(t, ctx, c, bare)
		if bare.Spec.Ports[0].NodePort != 0 || bare.Spec.Ports[1].NodePort != 30081 || bare.Spec.HealthCheckNodePort != 0 {
			t.Errorf("allocateLoadBalancerNodePorts false: ports %v, hc %d; want none picked, the requested one kept", bare.Spec.Ports, bare.Spec.HealthCheckNodePort)
		}
		expectHeld(t, ctx, s.etcd, int(hc), int(np), 30081)

		// A changed healthCheckNodePort is refused as upstream (1.37) refuses
		// it, by validation (nothing reserved, nothing released); one left
		// out is kept.
		_, err := updateErr(ctx, c, "lb-local", func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 30099 })
		expectStatus(t, err, 422, "spec.healthCheckNodePort: Forbidden: field is immutable")
		expectHeld(t, ctx, s.etcd, int(hc), int(np), 30081)
		lb = update(t, ctx, c, "lb-local", func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 0 })
		if lb.Spec.HealthCheckNodePort != hc {
			t.Errorf("update without healthCheckNodePort: got %d, want %d kept", lb.Spec.HealthCheckNodePort, hc)
		}

		// Local → Cluster releases the health check port once stored.
		update(t, ctx, c, "lb-local", func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		})
		expectHeld(t, ctx, s.etcd, int(np), 30081)
		mustDelete(t, ctx, c, "lb-local")
		mustDelete(t, ctx, c, "lb-bare")
		expectHeld(t, ctx, s.etcd)
	})

	// A node port is never given twice within one Service.
	// The health-check port is held by the Service but is not one of its
	// ports' node ports, so a port asking for it must be refused as taken.
	t.Run("a port asking for the health check port is refused", func(t *testing.T) {
		lb := nodePortService("lb-swap", corev1.ServiceTypeLoadBalancer, tcp(80, 30093), tcp(81, 30076))
		lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		lb.Spec.HealthCheckNodePort = 30118
		mustCreate(t, ctx, c, lb)
		expectHeld(t, ctx, s.etcd, 30076, 30093, 30118)

		_, err := updateErr(ctx, c, "lb-swap", func(s *corev1.Service) {
			s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort = 30076, 30118
			s.Spec.HealthCheckNodePort = 0 // left out: kept
		})
		expectStatus(t, err, 422, "spec.ports[1].nodePort: Invalid value: 30118: provided port is already allocated")
		expectHeld(t, ctx, s.etcd, 30076, 30093, 30118)

		// Swapping the Service's own two node ports is fine and holds the same set.
		got := update(t, ctx, c, "lb-swap", func(s *corev1.Service) {
			s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort = 30076, 30093
		})
		if got.Spec.Ports[0].NodePort != 30076 || got.Spec.Ports[1].NodePort != 30093 || got.Spec.HealthCheckNodePort != 30118 {
			t.Errorf("after the swap: ports %v, hc %d", got.Spec.Ports, got.Spec.HealthCheckNodePort)
		}
		expectHeld(t, ctx, s.etcd, 30076, 30093, 30118)

		mustDelete(t, ctx, c, "lb-swap")
		expectHeld(t, ctx, s.etcd)
	})

	t.Run("type changes both ways", func(t *testing.T) {
		mustCreate(t, ctx, c, nodePortService("morph", corev1.ServiceTypeClusterIP))
		expectHeld(t, ctx, s.etcd)

		svc := update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		np := svc.Spec.Ports[0].NodePort
		if np == 0 {
			t.Fatal("ClusterIP → NodePort got no nodePort")
		}
		expectHeld(t, ctx, s.etcd, int(np))

		svc = update(t, ctx, c, "morph", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		if svc.Spec.Ports[0].NodePort != np || svc.Spec.HealthCheckNodePort == 0 {
			t.Fatalf("NodePort → LoadBalancer (Local): nodePort %d (was %d), hc %d", svc.Spec.Ports[0].NodePort, np, svc.Spec.HealthCheckNodePort)
		}
		hc := svc.Spec.HealthCheckNodePort
		expectHeld(t, ctx, s.etcd, int(np), int(hc))

		svc = update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		if svc.Spec.Ports[0].NodePort != np || svc.Spec.HealthCheckNodePort != 0 || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			t.Fatalf("LoadBalancer → NodePort: nodePort %d, hc %d, policy %q", svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort, svc.Spec.ExternalTrafficPolicy)
		}
		expectHeld(t, ctx, s.etcd, int(np))

		svc = update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
		if svc.Spec.Ports[0].NodePort != 0 || svc.Spec.ExternalTrafficPolicy != "" {
			t.Fatalf("NodePort → ClusterIP kept nodePort %d, policy %q", svc.Spec.Ports[0].NodePort, svc.Spec.ExternalTrafficPolicy)
		}
		expectHeld(t, ctx, s.etcd)

		svc = update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })
		np = svc.Spec.Ports[0].NodePort
		if np == 0 {
			t.Fatal("ClusterIP → LoadBalancer got no nodePort")
		}
		expectHeld(t, ctx, s.etcd, int(np))

		// A changed nodePort takes the new one and releases the old one once stored.
		update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30200 })
		expectHeld(t, ctx, s.etcd, 30200)
		// A replace that leaves nodePort out keeps it.
		svc = update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 0 })
		if svc.Spec.Ports[0].NodePort != 30200 {
			t.Errorf("update without nodePort: got %d, want 30200 kept", svc.Spec.Ports[0].NodePort)
		}
		// A changed port to a taken one fails and releases nothing.
		mustCreate(t, ctx, c, nodePortService("other", corev1.ServiceTypeNodePort, tcp(80, 30201)))
		svc.Spec.Ports[0].NodePort = 30201
		_, err := c.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{})
		expectStatus(t, err, 422, "spec.ports[0].nodePort: Invalid value: 30201: provided port is already allocated")
		expectHeld(t, ctx, s.etcd, 30200, 30201)

		update(t, ctx, c, "morph", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
		expectHeld(t, ctx, s.etcd, 30201)
		mustDelete(t, ctx, c, "morph")
		mustDelete(t, ctx, c, "other")
		expectHeld(t, ctx, s.etcd)
	})

	t.Run("dry-run reserves nothing", func(t *testing.T) {
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		out, err := c.CoreV1().Services("default").Create(ctx, nodePortService("dry", corev1.ServiceTypeNodePort, tcp(80, 30090), tcp(81, 0)), dry)
		if err != nil {
			t.Fatal(err)
		}
		if out.Spec.Ports[1].NodePort == 0 {
			t.Error("dry-run create shows no picked nodePort")
		}
		expectHeld(t, ctx, s.etcd)
		mustCreate(t, ctx, c, nodePortService("real", corev1.ServiceTypeNodePort, tcp(80, 30090)))
		_, err = c.CoreV1().Services("default").Create(ctx, nodePortService("dry2", corev1.ServiceTypeNodePort, tcp(80, 30090)), dry)
		expectStatus(t, err, 422, "provided port is already allocated")
		mustDelete(t, ctx, c, "real")
		expectHeld(t, ctx, s.etcd)
	})
}

// TestNodePortMetrics: upstream's node-port metric names, gauges from the
// first scrape, counters per scope.
func TestNodePortMetrics(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOptions{serviceRange: "10.96.0.0/16"})
	ctx := testContext(t)
	scrape := func() string { return scrapeMetrics(t, ctx, s.client) }
	text := scrape()
	for _, want := range []string{
		"kube_apiserver_nodeport_allocator_allocated_ports 0",
		"kube_apiserver_nodeport_allocator_available_ports 2768",
		"apiserver_nodeport_repair_reconcile_errors_total 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	mustCreate(t, ctx, s.client, nodePortService("m1", corev1.ServiceTypeNodePort, tcp(80, 30080), tcp(81, 0)))
	_, err := create(ctx, s.client, nodePortService("m2", corev1.ServiceTypeNodePort, tcp(80, 30080)))
	expectStatus(t, err, 422, "provided port is already allocated")
	text = scrape()
	for _, want := range []string{
		"kube_apiserver_nodeport_allocator_allocated_ports 2",
		"kube_apiserver_nodeport_allocator_available_ports 2766",
		`kube_apiserver_nodeport_allocator_allocation_total{scope="static"} 1`,
		`kube_apiserver_nodeport_allocator_allocation_total{scope="dynamic"} 1`,
		`kube_apiserver_nodeport_allocator_allocation_errors_total{scope="static"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics after creates lacks %q", want)
		}
	}
}

// TestNodePortsReplicas: four servers on one etcd create NodePort Services
// at once; no two Services share a nodePort and the map holds exactly theirs.
func TestNodePortsReplicas(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	const replicas, perReplica = 4, 30
	var servers []*server
	for range replicas {
		servers = append(servers, startServer(t, serverOptions{serviceRange: "10.96.0.0/16", etcd: etcd}))
	}
	ctx := testContext(t)
	var mu sync.Mutex
	owner := map[int32]string{}
	var wg sync.WaitGroup
	errs := make(chan error, replicas*perReplica)
	for r, s := range servers {
		for i := range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("r%d-%d", r, i)
				svc, err := create(ctx, s.client, nodePortService(name, corev1.ServiceTypeNodePort, tcp(80, 0), tcp(81, 0)))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range svc.Spec.Ports {
					if prev, dup := owner[p.NodePort]; dup {
						errs <- fmt.Errorf("nodePort %d given to %s and %s", p.NodePort, prev, name)
					}
					owner[p.NodePort] = name
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var want []int
	for p := range owner {
		want = append(want, int(p))
	}
	if len(want) != replicas*perReplica*2 {
		t.Errorf("%d distinct nodePorts, want %d", len(want), replicas*perReplica*2)
	}
	expectHeld(t, ctx, etcd, want...)
}

// TestNodePortsOnUpstreamData: on kube-apiserver's etcd data the stored
// node-port map decodes, stays kube-apiserver's, and new ports never collide
// with what it holds.
func TestNodePortsOnUpstreamData(t *testing.T) {
	t.Parallel()
	f := fixtures.Load(t, fixtures.Bitmap132)
	etcd := etcdtest.New(t)
	ctx := testContext(t)
	if _, err := fixtures.Put(ctx, etcd.Client(), f); err != nil {
		t.Fatal(err)
	}
	value, _ := f.Value(etcdlayout.Layout{Prefix: f.EtcdPrefix}.ServiceNodePortRange())
	ra, err := etcdlayout.DecodeRangeAllocation(value)
	if err != nil || ra.Range != nodeport.Default {
		t.Fatalf("fixture's node-port map: range %q, %v", ra.Range, err)
	}
	before := heldPorts(t, ctx, etcd)
	s := startServer(t, serverOptions{model: "bitmap", serviceRange: "10.96.0.0/16", etcd: etcd})
	seen := map[int]bool{}
	for _, p := range before {
		seen[p] = true
	}
	for i := range 20 {
		svc := mustCreate(t, ctx, s.client, nodePortService(fmt.Sprintf("new-%d", i), corev1.ServiceTypeNodePort))
		p := int(svc.Spec.Ports[0].NodePort)
		if seen[p] {
			t.Fatalf("nodePort %d was already held", p)
		}
		seen[p] = true
	}
	if got := heldPorts(t, ctx, etcd); len(got) != len(before)+20 {
		t.Errorf("map holds %d ports, want %d", len(got), len(before)+20)
	}
}
