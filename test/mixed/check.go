package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/portrange"
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
	for _, other := range lists[1:] {
		for key, a := range services {
			if !slices.Equal(other[key].IPs, a.IPs) || !slices.Equal(other[key].NodePorts, a.NodePorts) {
				f.ReadbackMismatch++
			}
		}
		for key := range other {
			if _, ok := services[key]; !ok {
				f.ReadbackMismatch++
			}
		}
	}

	// 2. No ClusterIP is held twice.
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
	var examples []string
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

	// 3. Every acknowledged create is stored, with its IPs.
	acks, err := readAcks(*acksFile)
	if err != nil {
		return false, err
	}
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

	// 4. Allocation records in etcd: IPAddress (and bit, when a map exists).
	etcd, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*etcdServers, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return false, fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	layout := etcdlayout.Layout{Prefix: *etcdPrefix}
	owners, err := ipAddressOwners(ctx, etcd, layout)
	if err != nil {
		return false, err
	}
	maps, err := bitmap.ReadStoredIPMaps(ctx, etcd, layout)
	if err != nil {
		return false, err
	}
	for ip, keys := range holders {
		// Per Service: of two Services on one IP, at most one holds the record.
		for _, key := range keys {
			owner, ok := owners[ip]
			switch {
			case !ok:
				f.IPAddressMissing++
			case owner != key:
				f.IPAddressWrongOwner++
			}
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		for _, m := range maps {
			if m.Range.Contains(addr) {
				if has, _ := m.Map.Has(ctx, addr); !has {
					f.BitmapMissing++
				}
			}
		}
	}
	if len(portHolders) > 0 {
		missing, err := nodePortBitsMissing(ctx, etcd, layout, portHolders)
		if err != nil {
			return false, err
		}
		f.NodePortBitMissing = missing
	}
	mapNames := []string{}
	for _, m := range maps {
		mapNames = append(mapNames, fmt.Sprintf("%s=%s", m.Key, m.Range.Prefix()))
	}
	slices.Sort(mapNames)

	summary := map[string]any{
		"phase": *phase, "scenario": *scenario, "ok": f.ok(), "findings": f,
		"services": len(services), "acknowledged": len(acks), "ipaddresses": len(owners), "bitmaps": mapNames,
		"node_ports": len(portHolders),
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

// nodePortBitsMissing counts the held node ports whose bit is clear in the
// node-port map (bit i is the range's base + i).
func nodePortBitsMissing(ctx context.Context, etcd *clientv3.Client, layout etcdlayout.Layout, held map[int32][]string) (int, error) {
	key := layout.ServiceNodePortRange()
	resp, err := etcd.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return len(held), nil
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil {
		return 0, etcdlayout.WithKey(key, err)
	}
	rng, err := portrange.Parse(ra.Range)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	missing := 0
	for port := range held {
		i := int(port) - rng.Base()
		b := len(ra.Data) - 1 - i/8
		if !rng.Contains(int(port)) || b < 0 || ra.Data[b]&(1<<(i%8)) == 0 {
			missing++
		}
	}
	return missing, nil
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

// ipAddressOwners maps each IPAddress's name (the IP) to its parent Service
// "namespace/name" ("" when the parent is not a Service).
func ipAddressOwners(ctx context.Context, etcd *clientv3.Client, layout etcdlayout.Layout) (map[string]string, error) {
	resp, err := etcd.Get(ctx, layout.IPAddressesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read IPAddresses: %w", err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name, parent, err := decodeIPAddress(kv.Value)
		if err != nil {
			return nil, etcdlayout.WithKey(string(kv.Key), err)
		}
		owner := ""
		if parent != nil && parent.Group == "" && parent.Resource == "services" {
			owner = parent.Namespace + "/" + parent.Name
		}
		out[name] = owner
	}
	return out, nil
}

// decodeIPAddress returns an IPAddress's name and parentRef, whether
// stored as networking.k8s.io/v1 or as v1beta1 (kube-apiserver 1.33).
func decodeIPAddress(value []byte) (string, *networkingv1.ParentReference, error) {
	obj, err := etcdlayout.DecodeIPAddress(value)
	if err != nil {
		return "", nil, err
	}
	return obj.Name, obj.Spec.ParentRef, nil
}
