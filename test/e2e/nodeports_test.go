package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/repair"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/repair/report"
)

// kubectl runs the real kubectl against s and returns its combined output
// and whether it succeeded.
func (s *embeddedServer) kubectl(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err == nil
}

// TestKubectlNodePorts: kubectl creates NodePort and LoadBalancer Services,
// sees upstream's error texts, and `get svc` shows 80:3xxxx/TCP.
func TestKubectlNodePorts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not found")
	}
	bin := buildBinary(t)
	s := startEmbedded(t, bin, "", "--service-node-port-range", "30000-32767")

	if out, ok := s.kubectl(t, "create", "service", "nodeport", "np-a", "--tcp=80:8080", "--node-port=30080"); !ok {
		t.Fatalf("create np-a: %s", out)
	}
	for _, tc := range []struct{ name, tcp, nodePort, want string }{
		{"np-b", "81:80", "30080", `Service "np-b" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`},
		{"np-c", "82:80", "20000", `Service "np-c" is invalid: spec.ports[0].nodePort: Invalid value: 20000: provided port is not in the valid range. The range of valid ports is 30000-32767`},
	} {
		out, ok := s.kubectl(t, "create", "service", "nodeport", tc.name, "--tcp="+tc.tcp, "--node-port="+tc.nodePort)
		if ok || !strings.Contains(out, tc.want) {
			t.Errorf("create %s: succeeded=%v, output %q, want %q", tc.name, ok, out, tc.want)
		}
	}
	if out, ok := s.kubectl(t, "create", "service", "nodeport", "np-d", "--tcp=80:8080"); !ok {
		t.Fatalf("create np-d: %s", out)
	}
	if out, ok := s.kubectl(t, "create", "service", "loadbalancer", "lb", "--tcp=80:8080"); !ok {
		t.Fatalf("create lb: %s", out)
	}
	out, ok := s.kubectl(t, "get", "svc")
	if !ok {
		t.Fatalf("get svc: %s", out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^np-a\s+NodePort\s+10\.\S+\s+<none>\s+80:30080/TCP\s`),
		regexp.MustCompile(`(?m)^np-d\s+NodePort\s+10\.\S+\s+<none>\s+80:3\d{4}/TCP\s`),
		regexp.MustCompile(`(?m)^lb\s+LoadBalancer\s+10\.\S+\s+<pending>\s+80:3\d{4}/TCP\s`),
	} {
		if !want.MatchString(out) {
			t.Errorf("get svc lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "np-b") || strings.Contains(out, "np-c") {
		t.Errorf("refused Services listed:\n%s", out)
	}
	if out, ok := s.kubectl(t, "delete", "svc", "np-a"); !ok {
		t.Fatalf("delete np-a: %s", out)
	}
	// The deleted Service's port is free again.
	if out, ok := s.kubectl(t, "create", "service", "nodeport", "np-e", "--tcp=80:8080", "--node-port=30080"); !ok {
		t.Errorf("create on the released 30080: %s", out)
	}
}

// TestRepairCLINodePorts: the standalone job repairs the node-port map too,
// with the same report, exit codes and three-pass rule as for IPs.
func TestRepairCLINodePorts(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	etcd := etcdtest.New(t)
	kubeconfig, _ := startServe(t, bin, etcd, "--service-cluster-ip-range", "10.0.0.0/24")
	ctx := context.Background()
	store, err := nodeport.NewEtcd(etcd.Client(), "/registry/ranges/servicenodeports", nodeport.MustParse(nodeport.Default), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Allocate(ctx, 30300); err != nil { // a leak
		t.Fatal(err)
	}
	common := []string{"--kubeconfig", kubeconfig, "--etcd-servers", strings.Join(etcd.Endpoints(), ",")}
	out, code := runJob(t, bin, append([]string{"repair", "--dry-run", "-o", "json"}, common...)...)
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("dry-run output is not a JSON report: %v\n%s", err, out)
	}
	found := slices.ContainsFunc(rep.Problems, func(p report.Problem) bool {
		return p.Type == report.TypeLeak && p.IP == "30300" && p.Resource == repair.ResourceNodePort
	})
	if code != 2 || !found {
		t.Fatalf("dry run: exit %d, problems %+v", code, rep.Problems)
	}
	out, code = runJob(t, bin, append([]string{"repair", "--leak-grace", "1s"}, common...)...)
	if code != 0 || !strings.Contains(out, "nodePort:30300") {
		t.Fatalf("repair: exit %d\n%s", code, out)
	}
	if has, _ := store.Has(ctx, 30300); has {
		t.Fatal("repair did not free the leaked node port 30300")
	}
}
