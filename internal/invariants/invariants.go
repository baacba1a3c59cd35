package invariants

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
)

// pageSize is how many keys one etcd read returns: a large cluster is read in
// pages, all at the revision of the first.
const pageSize = 1000

// Kind is what a finding is about.
type Kind string

const (
	ClusterIP Kind = "clusterIP"
	NodePort  Kind = "nodePort"
)

// Holding is what one stored Service holds.
type Holding struct {
	// UID is the Service's metadata.uid.
	UID string
	// IPs are its cluster IPs: the addresses, canonical and primary first,
	// then the texts that name no address.
	IPs []string
	// NodePorts are its node ports and health-check node port, sorted, each once.
	NodePorts []int
}

// Shared is one value held by two or more stored Services.
type Shared struct {
	Kind  Kind
	Value string
	// Services are the holders, "namespace/name", sorted.
	Services []string
}

// Reason is what makes a Finding.
type Reason string

const (
	// NoRecord: nothing could reserve the value: no IPAddress of that
	// name, no map stored, or outside the range of every stored map.
	NoRecord Reason = "no record"
	// OtherParent: the value's IPAddress names another parent.
	OtherParent Reason = "other parent"
	// BitClear: the value's bit is clear in the map whose range holds it.
	BitClear Reason = "bit clear"
	// ParentAbsent: an IPAddress whose parent Service is not stored.
	ParentAbsent Reason = "parent absent"
	// ParentElsewhere: an IPAddress whose parent Service holds other
	// addresses.
	ParentElsewhere Reason = "parent elsewhere"
	// NoHolder: a bit set for a value no stored Service holds.
	NoHolder Reason = "no holder"
)

// Finding is one value held without its reservation (reasons NoRecord,
// OtherParent, BitClear), or one reservation held by no Service
// (ParentAbsent, ParentElsewhere, NoHolder).
type Finding struct {
	Kind  Kind
	Value string
	// Service is the holder (Unreserved) or the parent the record names
	// (Leaked, IPAddress model); empty for a bit nobody holds.
	Service string
	Reason  Reason
	// Detail says it in words, naming the record.
	Detail string
}

// Report is the state Check read, and what breaks the invariants in it.
type Report struct {
	// Model is the model whose reservations were read.
	Model model.Name
	// Revision is the etcd revision every read was made at.
	Revision int64
	// Services are the stored Services by "namespace/name".
	Services map[string]Holding
	// IPAddresses is how many IPAddress objects were read (IPAddress model).
	IPAddresses int
	// Maps are the allocation maps read, "key=range", sorted.
	Maps []string

	DuplicateIPs       []Shared
	DuplicateNodePorts []Shared
	Unreserved         []Finding
	Leaked             []Finding
}

// OK reports whether no invariant is broken: no duplicate and nothing
// unreserved. Leaks are not violations (see the package doc).
func (r *Report) OK() bool {
	return len(r.DuplicateIPs) == 0 && len(r.DuplicateNodePorts) == 0 && len(r.Unreserved) == 0
}

// Summary is one line of counts.
func (r *Report) Summary() string {
	return fmt.Sprintf("%s model at revision %d: %d Services, %d duplicate ClusterIPs, %d duplicate node ports, %d unreserved, %d leaked",
		r.Model, r.Revision, len(r.Services), len(r.DuplicateIPs), len(r.DuplicateNodePorts), len(r.Unreserved), len(r.Leaked))
}

// String is the Summary followed by a table of every finding.
func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(r.Summary())
	if len(r.DuplicateIPs)+len(r.DuplicateNodePorts)+len(r.Unreserved)+len(r.Leaked) == 0 {
		return b.String()
	}
	b.WriteString("\n")
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FINDING\tKIND\tVALUE\tSERVICE\tDETAIL")
	for _, s := range slices.Concat(r.DuplicateIPs, r.DuplicateNodePorts) {
		fmt.Fprintf(w, "duplicate\t%s\t%s\t%s\t\n", s.Kind, s.Value, strings.Join(s.Services, ", "))
	}
	for _, f := range r.Unreserved {
		fmt.Fprintf(w, "unreserved\t%s\t%s\t%s\t%s\n", f.Kind, f.Value, f.Service, f.Detail)
	}
	for _, f := range r.Leaked {
		fmt.Fprintf(w, "leaked\t%s\t%s\t%s\t%s\n", f.Kind, f.Value, f.Service, f.Detail)
	}
	_ = w.Flush()
	return strings.TrimSuffix(b.String(), "\n")
}

// Check reads the stored Services under layout and the reservations of model
// m (bitmap or ipaddress), all at one etcd revision, and reports on them.
func Check(ctx context.Context, kv clientv3.KV, layout etcdlayout.Layout, m model.Name) (*Report, error) {
	if m != model.Bitmap && m != model.IPAddress {
		return nil, fmt.Errorf("check: model %q: want %s or %s", m, model.Bitmap, model.IPAddress)
	}
	snap := &snapshot{kv: kv}
	r := &Report{Model: m, Services: map[string]Holding{}}
	err := snap.list(ctx, layout.ServicesPrefix(), func(key string, value []byte) error {
		svc, err := etcdlayout.DecodeService(value)
		if err != nil {
			return etcdlayout.WithKey(key, err)
		}
		r.Services[svc.Namespace+"/"+svc.Name] = HoldingOf(svc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Revision = snap.rev
	ipHolders, portHolders := r.holders()
	r.DuplicateIPs = shared(ClusterIP, ipHolders)
	r.DuplicateNodePorts = shared(NodePort, portHolders)

	if m == model.IPAddress {
		err = r.checkIPAddresses(ctx, snap, layout)
	} else {
		err = r.checkIPMaps(ctx, snap, layout, ipHolders)
	}
	if err != nil {
		return nil, err
	}
	if err := r.checkNodePorts(ctx, snap, layout, portHolders); err != nil {
		return nil, err
	}
	slices.SortFunc(r.Unreserved, compareFindings)
	slices.SortFunc(r.Leaked, compareFindings)
	slices.Sort(r.Maps)
	return r, nil
}

// HoldingOf is what svc holds (package doc), as internal/holding decides it.
func HoldingOf(svc *corev1.Service) Holding {
	h := Holding{UID: string(svc.UID), NodePorts: holding.NodePorts(svc)}
	ips, invalid := holding.ClusterIPs(svc)
	for _, ip := range ips {
		h.IPs = append(h.IPs, ip.String())
	}
	h.IPs = append(h.IPs, invalid...)
	return h
}

// holders maps each held ClusterIP and node port to its holders, sorted.
func (r *Report) holders() (ips map[string][]string, ports map[string][]string) {
	ips, ports = map[string][]string{}, map[string][]string{}
	for name, h := range r.Services {
		for _, ip := range slices.Compact(slices.Sorted(slices.Values(h.IPs))) {
			ips[ip] = append(ips[ip], name)
		}
		for _, p := range h.NodePorts {
			ports[strconv.Itoa(p)] = append(ports[strconv.Itoa(p)], name)
		}
	}
	for _, m := range []map[string][]string{ips, ports} {
		for _, names := range m {
			slices.Sort(names)
		}
	}
	return ips, ports
}

// shared lists the values of holders held by more than one Service.
func shared(kind Kind, holders map[string][]string) []Shared {
	var out []Shared
	for value, names := range holders {
		if len(names) > 1 {
			out = append(out, Shared{Kind: kind, Value: value, Services: names})
		}
	}
	slices.SortFunc(out, func(a, b Shared) int { return compareValues(a.Value, b.Value) })
	return out
}

// checkIPAddresses checks every Service address against the IPAddresses.
func (r *Report) checkIPAddresses(ctx context.Context, snap *snapshot, layout etcdlayout.Layout) error {
	parents := map[string]string{} // IPAddress name → parent Service, "" when the parent is no Service
	err := snap.list(ctx, layout.IPAddressesPrefix(), func(key string, value []byte) error {
		obj, err := etcdlayout.DecodeIPAddress(value)
		if err != nil {
			return etcdlayout.WithKey(key, err)
		}
		parent := ""
		if ipaddress.ParentIsService(obj) {
			parent = obj.Spec.ParentRef.Namespace + "/" + obj.Spec.ParentRef.Name
		}
		parents[obj.Name] = parent
		return nil
	})
	if err != nil {
		return err
	}
	r.IPAddresses = len(parents)
	for name, h := range r.Services {
		for _, ip := range h.IPs {
			parent, ok := parents[ip]
			switch {
			case !ok:
				r.unreserved(ClusterIP, ip, name, NoRecord, "no IPAddress")
			case parent == "":
				r.unreserved(ClusterIP, ip, name, OtherParent, "its IPAddress's parent is not a Service")
			case parent != name:
				r.unreserved(ClusterIP, ip, name, OtherParent, "its IPAddress's parent is "+parent)
			}
		}
	}
	for ip, parent := range parents {
		if parent == "" {
			continue
		}
		h, ok := r.Services[parent]
		switch {
		case !ok:
			r.leaked(ClusterIP, ip, parent, ParentAbsent, "IPAddress whose parent Service is not stored")
		case !slices.Contains(h.IPs, ip):
			r.leaked(ClusterIP, ip, parent, ParentElsewhere, "IPAddress whose parent Service does not hold it")
		}
	}
	return nil
}

// checkIPMaps checks every Service address against the ClusterIP maps.
func (r *Report) checkIPMaps(ctx context.Context, snap *snapshot, layout etcdlayout.Layout, holders map[string][]string) error {
	maps, err := clusterip.ReadStoredIPMaps(ctx, snap.atRevision(), layout)
	if err != nil {
		return err
	}
	for _, m := range maps {
		r.Maps = append(r.Maps, m.Key+"="+m.Range.Prefix().String())
	}
	for name, h := range r.Services {
		for _, ip := range h.IPs {
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				r.unreserved(ClusterIP, ip, name, NoRecord, "not an IP address")
				continue
			}
			i := slices.IndexFunc(maps, func(m clusterip.StoredIPMap) bool { return m.Range.Contains(addr) })
			if i < 0 {
				r.unreserved(ClusterIP, ip, name, NoRecord, "in no stored ClusterIP map's range")
				continue
			}
			has, err := maps[i].Map.Has(ctx, addr)
			if err != nil {
				return fmt.Errorf("%s: %w", maps[i].Key, err)
			}
			if !has {
				r.unreserved(ClusterIP, ip, name, BitClear, "bit clear in "+maps[i].Key)
			}
		}
	}
	for _, m := range maps {
		err := m.Map.ForEach(ctx, func(addr netip.Addr) {
			if len(holders[addr.String()]) == 0 {
				r.leaked(ClusterIP, addr.String(), "", NoHolder, "bit set in "+m.Key)
			}
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m.Key, err)
		}
	}
	return nil
}

// checkNodePorts checks every Service node port against the node-port map.
func (r *Report) checkNodePorts(ctx context.Context, snap *snapshot, layout etcdlayout.Layout, holders map[string][]string) error {
	key := layout.ServiceNodePortRange()
	resp, err := snap.get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		for name, h := range r.Services {
			for _, p := range h.NodePorts {
				r.unreserved(NodePort, strconv.Itoa(p), name, NoRecord, "no node-port map stored")
			}
		}
		return nil
	}
	ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
	if err != nil {
		return etcdlayout.WithKey(key, err)
	}
	rng, err := nodeport.Parse(ra.Range)
	if err != nil {
		return fmt.Errorf("%s: range: %w", key, err)
	}
	r.Maps = append(r.Maps, key+"="+rng.String())
	set := map[int]bool{}
	for _, i := range setBits(ra.Data) {
		set[rng.Base()+i] = true
	}
	for name, h := range r.Services {
		for _, p := range h.NodePorts {
			switch {
			case !rng.Contains(p):
				r.unreserved(NodePort, strconv.Itoa(p), name, NoRecord, "outside the node-port map's range "+rng.String())
			case !set[p]:
				r.unreserved(NodePort, strconv.Itoa(p), name, BitClear, "bit clear in "+key)
			}
		}
	}
	for p := range set {
		if len(holders[strconv.Itoa(p)]) == 0 {
			r.leaked(NodePort, strconv.Itoa(p), "", NoHolder, "bit set in "+key)
		}
	}
	return nil
}

// setBits returns the slots set in a RangeAllocation's data (design.md §5:
// slot i is bit i%8 of byte len-1-i/8).
func setBits(data []byte) []int {
	var out []int
	for b := range data {
		for bit := range 8 {
			if data[len(data)-1-b]&(1<<bit) != 0 {
				out = append(out, b*8+bit)
			}
		}
	}
	return out
}

func (r *Report) unreserved(kind Kind, value, service string, reason Reason, detail string) {
	r.Unreserved = append(r.Unreserved, Finding{Kind: kind, Value: value, Service: service, Reason: reason, Detail: detail})
}

func (r *Report) leaked(kind Kind, value, service string, reason Reason, detail string) {
	r.Leaked = append(r.Leaked, Finding{Kind: kind, Value: value, Service: service, Reason: reason, Detail: detail})
}

func compareFindings(a, b Finding) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), compareValues(a.Value, b.Value), cmp.Compare(a.Service, b.Service))
}

// compareValues orders addresses as addresses and ports as numbers.
func compareValues(a, b string) int {
	if x, err := netip.ParseAddr(a); err == nil {
		if y, err := netip.ParseAddr(b); err == nil {
			return x.Compare(y)
		}
	}
	if x, err := strconv.Atoi(a); err == nil {
		if y, err := strconv.Atoi(b); err == nil {
			return cmp.Compare(x, y)
		}
	}
	return cmp.Compare(a, b)
}

// snapshot reads etcd at one revision: the revision of its first read.
type snapshot struct {
	kv  clientv3.KV
	rev int64 // 0 until the first read
}

func (s *snapshot) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if s.rev != 0 {
		opts = append(opts, clientv3.WithRev(s.rev))
	}
	resp, err := s.kv.Get(ctx, key, opts...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if s.rev == 0 {
		s.rev = resp.Header.Revision
	}
	return resp, nil
}

// list calls fn for every key under prefix, in key order, a page at a time.
func (s *snapshot) list(ctx context.Context, prefix string, fn func(key string, value []byte) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		resp, err := s.get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(pageSize))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if err := fn(string(kv.Key), kv.Value); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// atRevision is the snapshot as a clientv3.KV for readers that take one
// (clusterip.ReadStoredIPMaps); only its Get is meant to be used.
func (s *snapshot) atRevision() clientv3.KV { return revisionKV{KV: s.kv, rev: s.rev} }

type revisionKV struct {
	clientv3.KV
	rev int64
}

func (kv revisionKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return kv.KV.Get(ctx, key, append(opts, clientv3.WithRev(kv.rev))...)
}
