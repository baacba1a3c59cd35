package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// findings counts every violated invariant; all must be zero.
type findings struct {
	// DuplicateIPs are ClusterIPs held by more than one Service.
	DuplicateIPs int `json:"duplicate_ips"`
	// SharingServices are the Services beyond the first on those IPs.
	SharingServices int `json:"services_sharing_an_ip"`
	// Lost are acknowledged creates that no server returns.
	Lost int `json:"lost_acknowledged"`
	// Changed are acknowledged creates stored with other IPs than acknowledged.
	Changed int `json:"changed_ip"`
	// ReadbackMismatch are Services that the servers list differently.
	ReadbackMismatch int `json:"readback_mismatch"`
	// IPAddressMissing are Services whose IP has no IPAddress object.
	IPAddressMissing int `json:"ipaddress_missing"`
	// IPAddressWrongOwner are Services whose IP's IPAddress names another parent.
	IPAddressWrongOwner int `json:"ipaddress_wrong_owner"`
	// BitmapMissing are Service IPs inside a stored RangeAllocation whose bit is clear.
	BitmapMissing int `json:"bitmap_missing"`
	// DuplicateNodePorts are node ports held by more than one Service.
	DuplicateNodePorts int `json:"duplicate_node_ports"`
	// NodePortChanged are acknowledged creates stored with other nodePorts.
	NodePortChanged int `json:"node_port_changed"`
	// NodePortBitMissing are Service node ports whose bit in the node-port map is clear.
	NodePortBitMissing int `json:"node_port_bit_missing"`
}

func (f findings) ok() bool { return f == findings{} }

func runCheck(args []string) (bool, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	servers := fs.String("servers", "", "name=kubeconfig,... of the API servers to read back from")
	acksFile := fs.String("acks", "", "the acknowledged creates written by `mixed load`")
	etcdServers := fs.String("etcd-servers", "", "etcd the servers share (IPAddresses and bitmaps are read there)")
	etcdPrefix := fs.String("etcd-prefix", etcdlayout.DefaultPrefix, "etcd prefix of the servers")
	scenario := fs.String("scenario", "", "scenario name for the summary")
	phase := fs.String("phase", "check", "phase name for the summary (e.g. before-repair)")
	timeout := fs.Duration("timeout", 2*time.Minute, "time limit of the check")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	targets, err := parseTargets(*servers)
	if err != nil {
		return false, err
	}
	ctx, cancel := withTimeout(*timeout)
	defer cancel()

	// 1. Read every Service back from every server.
	var lists []map[string]allocated
	for _, tg := range targets {
		m, err := listServices(ctx, tg)
		if err != nil {
			return false, err
		}
		lists = append(lists, m)
	}
	var f findings
	services := lists[0]
	f.ReadbackMismatch = readbackMismatches(services, lists[1:])

	// 2. No ClusterIP or node port is held twice.
	examples, nodePorts := f.countDuplicates(services)

	// 3. Every acknowledged create is stored, with its IPs.
	acks, err := readAcks(*acksFile)
	if err != nil {
		return false, err
	}
	f.checkAcks(acks, services)

	// 4. Allocation records in etcd: IPAddress (and bit, when a map exists).
	etcd, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*etcdServers, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return false, fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	recs, err := readRecords(ctx, etcd, etcdlayout.Layout{Prefix: *etcdPrefix})
	if err != nil {
		return false, err
	}
	f.IPAddressMissing, f.IPAddressWrongOwner = recs.ipAddressMissing, recs.ipAddressWrongOwner
	f.BitmapMissing, f.NodePortBitMissing = recs.bitmapMissing, recs.nodePortBitMissing

	summary := map[string]any{
		"phase": *phase, "scenario": *scenario, "ok": f.ok(), "findings": f,
		"services": len(services), "acknowledged": len(acks), "ipaddresses": recs.ipAddresses, "bitmaps": recs.ipMaps,
		"node_ports": nodePorts,
	}
	if len(examples) > 0 {
		slices.Sort(examples)
		summary["duplicate_examples"] = examples
	}
	if err := json.NewEncoder(os.Stdout).Encode(summary); err != nil {
		return false, err
	}
	return f.ok(), nil
}

// listServices returns namespace/name → the cluster IPs and nodePorts of
// every Service.
func listServices(ctx context.Context, tg target) (map[string]allocated, error) {
	out := map[string]allocated{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := tg.client.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list Services through %s: %w", tg.name, err)
		}
		for i := range list.Items {
			svc := &list.Items[i]
			out[svc.Namespace+"/"+svc.Name] = allocatedOf(svc)
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

func readAcks(path string) ([]ack, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acks: %w", err)
	}
	defer f.Close()
	var out []ack
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("acks %s: %w", path, err)
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// records are what check counts of the allocation records in etcd.
type records struct {
	// Per Service and address: no IPAddress, or one naming another parent.
	ipAddressMissing, ipAddressWrongOwner int
	// Addresses whose bit is clear in the stored map of their range.
	bitmapMissing int
	// Node ports absent from the node-port map (no map, outside its range, bit clear).
	nodePortBitMissing int
	// How many IPAddresses there are, and the ClusterIP maps as key=range.
	ipAddresses int
	ipMaps      []string
}

// readRecords checks the stored Services against both models' records,
// whichever exist (internal/invariants, once per model).
func readRecords(ctx context.Context, etcd *clientv3.Client, layout etcdlayout.Layout) (records, error) {
	var r records
	byIPAddress, err := invariants.Check(ctx, etcd, layout, model.IPAddress)
	if err != nil {
		return r, err
	}
	byBitmap, err := invariants.Check(ctx, etcd, layout, model.Bitmap)
	if err != nil {
		return r, err
	}
	r.ipAddresses = byIPAddress.IPAddresses
	ports := map[string]bool{}
	for _, u := range byIPAddress.Unreserved {
		switch {
		case u.Kind == invariants.NodePort:
			ports[u.Value] = true
		case u.Reason == invariants.NoRecord:
			r.ipAddressMissing++
		case u.Reason == invariants.OtherParent:
			r.ipAddressWrongOwner++
		}
	}
	r.nodePortBitMissing = len(ports)
	ips := map[string]bool{}
	for _, u := range byBitmap.Unreserved {
		if u.Kind == invariants.ClusterIP && u.Reason == invariants.BitClear {
			ips[u.Value] = true
		}
	}
	r.bitmapMissing = len(ips)
	r.ipMaps = []string{}
	for _, m := range byBitmap.Maps {
		if !strings.HasPrefix(m, layout.ServiceNodePortRange()+"=") {
			r.ipMaps = append(r.ipMaps, m)
		}
	}
	return r, nil
}

// readbackMismatches counts the Services the other servers read back
// differently from services (other addresses or ports, or missing), and
// those only they have.
func readbackMismatches(services map[string]allocated, others []map[string]allocated) int {
	n := 0
	for _, other := range others {
		for key, a := range services {
			if !slices.Equal(other[key].IPs, a.IPs) || !slices.Equal(other[key].NodePorts, a.NodePorts) {
				n++
			}
		}
		for key := range other {
			if _, ok := services[key]; !ok {
				n++
			}
		}
	}
	return n
}

// countDuplicates counts the ClusterIPs and node ports held by more than one
// of services, and returns up to three examples of shared ClusterIPs and the
// number of node ports held.
func (f *findings) countDuplicates(services map[string]allocated) (examples []string, nodePorts int) {
	holders := map[string][]string{}
	portHolders := map[int32][]string{}
	for key, a := range services {
		for _, ip := range a.IPs {
			if ip != corev1.ClusterIPNone {
				holders[ip] = append(holders[ip], key)
			}
		}
		for _, port := range slices.Compact(slices.Sorted(slices.Values(a.NodePorts))) {
			portHolders[port] = append(portHolders[port], key)
		}
	}
	for _, keys := range portHolders {
		if len(keys) > 1 {
			f.DuplicateNodePorts++
		}
	}
	for ip, keys := range holders {
		if len(keys) > 1 {
			f.DuplicateIPs++
			f.SharingServices += len(keys) - 1
			if len(examples) < 3 {
				slices.Sort(keys)
				examples = append(examples, ip+" "+strings.Join(keys, " "))
			}
		}
	}
	return examples, len(portHolders)
}

// checkAcks counts the acknowledged creates that are not stored, or stored
// with other addresses or ports.
func (f *findings) checkAcks(acks []ack, services map[string]allocated) {
	for _, a := range acks {
		got, ok := services[a.Namespace+"/"+a.Name]
		switch {
		case !ok:
			f.Lost++
		case !slices.Equal(got.IPs, a.IPs):
			f.Changed++
		case !slices.Equal(got.NodePorts, a.NodePorts):
			f.NodePortChanged++
		}
	}
}
