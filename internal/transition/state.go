package transition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// State is the cluster-wide transition state.
type State struct {
	// DualWrite is true while bitmap-model writers may be live: IPAddress-model
	// replicas then claim the bit as well as the IPAddress.
	DualWrite bool `json:"dualWrite"`
	// Changed is when the state was last written, By and Reason who wrote it
	// and why.
	Changed time.Time `json:"changed"`
	By      string    `json:"by"`
	Reason  string    `json:"reason,omitempty"`
	// Revision is the etcd ModRevision of the state key (not stored).
	Revision int64 `json:"-"`
	// Format is the layout version it was written in (see Format).
	Format int `json:"format,omitempty"`
}

func (s State) String() string {
	mode := "off (IPAddress objects only; the bitmap is retired)"
	if s.DualWrite {
		mode = "on (bitmap and IPAddress objects)"
	}
	return fmt.Sprintf("dual write %s since %s, set by %s", mode, s.Changed.UTC().Format(time.RFC3339), s.By)
}

// Record is one replica's entry under the replicas prefix.
type Record struct {
	ID    string     `json:"id"`
	Model model.Name `json:"model"`
	// DualWrite and StateRevision are what the replica acts on: it has
	// applied the state written at StateRevision, and every allocation it
	// began before writing this record has finished.
	DualWrite     bool      `json:"dualWrite"`
	StateRevision int64     `json:"stateRevision"`
	Host          string    `json:"host,omitempty"`
	PID           int       `json:"pid,omitempty"`
	Version       string    `json:"version,omitempty"`
	Started       time.Time `json:"started"`
	// Format is the layout version it was written in (see Format).
	Format int `json:"format,omitempty"`
}

// ErrRetired is returned to a bitmap-model replica when the transition was
// ended: the bitmap is no longer kept up to date, so allocating from it
// would hand out addresses the IPAddress-model replicas hold.
var ErrRetired = errors.New("the ClusterIP bitmap is retired: dual write was turned off by `allocator transition finish`; " +
	"run `allocator transition resume` before starting a bitmap-model replica (or run it with --allocator=ipaddress)")

// ReadState returns the stored state; ok is false when none is stored yet.
func ReadState(ctx context.Context, client *clientv3.Client, prefix string) (state State, ok bool, err error) {
	state, ok, _, err = readStateAt(ctx, client, prefix)
	return state, ok, err
}

// readStateAt is ReadState, also returning the revision etcd read it at:
// a watch from the next one misses no change.
func readStateAt(ctx context.Context, client *clientv3.Client, prefix string) (state State, ok bool, at int64, err error) {
	key := etcdlayout.Layout{Prefix: prefix}.AllocatorState()
	resp, err := client.Get(ctx, key)
	if err != nil {
		return State{}, false, 0, fmt.Errorf("read transition state %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return State{}, false, resp.Header.Revision, nil
	}
	state, err = decodeState(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	return state, err == nil, resp.Header.Revision, err
}

func decodeState(value []byte, rev int64) (State, error) {
	var s State
	if err := json.Unmarshal(value, &s); err != nil {
		return State{}, fmt.Errorf("decode transition state: %w", err)
	}
	if err := checkFormat("the transition state", s.Format); err != nil {
		return State{}, err
	}
	s.Revision = rev
	return s, nil
}

// ensureState returns the stored state, creating it with initial if none is
// stored, and the revision etcd read or wrote it at: a watch from the next
// one misses no change. Concurrent callers agree: the create is
// create-if-absent.
func ensureState(ctx context.Context, client *clientv3.Client, prefix string, initial State) (State, int64, error) {
	key := etcdlayout.Layout{Prefix: prefix}.AllocatorState()
	value, err := initial.encode()
	if err != nil {
		return State{}, 0, err
	}
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return State{}, 0, fmt.Errorf("create transition state %s: %w", key, err)
	}
	if resp.Succeeded {
		initial.Revision = resp.Header.Revision
		return initial, resp.Header.Revision, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return State{}, 0, fmt.Errorf("transition state %s: deleted while being read", key)
	}
	state, err := decodeState(kvs[0].Value, kvs[0].ModRevision)
	return state, resp.Header.Revision, err
}

// ListRecords returns the live replica records of model ("" for every model).
func ListRecords(ctx context.Context, client *clientv3.Client, prefix string, m model.Name) ([]Record, error) {
	p := etcdlayout.Layout{Prefix: prefix}.AllocatorReplicasPrefix(string(m))
	resp, err := client.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list replica records %s: %w", p, err)
	}
	out := make([]Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r Record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("decode replica record %s: %w", kv.Key, err)
		}
		if err := checkFormat(fmt.Sprintf("replica record %s", kv.Key), r.Format); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// APIServer is a live kube-apiserver identity lease: a writer this program
// cannot see the model of.
type APIServer struct {
	Name    string    `json:"name"`
	Holder  string    `json:"holder"`
	Renewed time.Time `json:"renewed"`
}

// LiveAPIServers returns the kube-apiserver identity leases in kube-system
// that are still within their lease duration at now.
func LiveAPIServers(ctx context.Context, client *clientv3.Client, prefix string, now time.Time) ([]APIServer, error) {
	p := etcdlayout.Layout{Prefix: prefix}.LeasesInNamespacePrefix("kube-system")
	resp, err := client.Get(ctx, p+"apiserver-", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list kube-apiserver identity leases: %w", err)
	}
	var out []APIServer
	for _, kv := range resp.Kvs {
		lease, err := etcdlayout.DecodeLease(kv.Value)
		if err != nil {
			// Unreadable (encrypted at rest, or corrupt): it may belong to a
			// live kube-apiserver, so it counts as one; --force overrides.
			out = append(out, APIServer{Name: strings.TrimPrefix(string(kv.Key), p), Holder: "unreadable lease: " + err.Error()})
			continue
		}
		if lease.Labels["apiserver.kubernetes.io/identity"] != "kube-apiserver" {
			continue
		}
		if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
			continue
		}
		expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
		if expires.Before(now) {
			continue
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		out = append(out, APIServer{Name: strings.TrimPrefix(string(kv.Key), p), Holder: holder, Renewed: lease.Spec.RenewTime.Time})
	}
	return out, nil
}

// Status is what `allocator transition status` shows.
type Status struct {
	State      State       `json:"state"`
	Stored     bool        `json:"stored"`
	Replicas   []Record    `json:"replicas"`
	APIServers []APIServer `json:"kubeAPIServers"`
}

// ReadStatus reads the state, the live replica records and the live
// kube-apiserver identity leases.
func ReadStatus(ctx context.Context, client *clientv3.Client, prefix string) (*Status, error) {
	state, ok, err := ReadState(ctx, client, prefix)
	if err != nil {
		return nil, err
	}
	records, err := ListRecords(ctx, client, prefix, "")
	if err != nil {
		return nil, err
	}
	servers, err := LiveAPIServers(ctx, client, prefix, time.Now())
	if err != nil {
		return nil, err
	}
	return &Status{State: state, Stored: ok, Replicas: records, APIServers: servers}, nil
}

// FinishOptions tune Finish.
type FinishOptions struct {
	// By names who ends the transition (stored in the state).
	By string
	// Force ends it although kube-apiserver identity leases are live.
	Force bool
}

// ErrBitmapWritersLive is returned by Finish while a bitmap-model writer may
// still be live.
var ErrBitmapWritersLive = errors.New("bitmap-model writers may still be live")

// Finish turns dual write off cluster-wide: the bitmap is retired (left in
// place, no longer written). It refuses while a bitmap-model replica record
// is live — in the same transaction that writes the state, so a bitmap
// replica starting at the same moment either blocks Finish or refuses to
// start — and, unless forced, while a kube-apiserver identity lease is live
// (its model cannot be seen). It returns the new state.
func Finish(ctx context.Context, client *clientv3.Client, prefix string, opts FinishOptions) (State, error) {
	if !opts.Force {
		if err := apiServersLive(ctx, client, prefix); err != nil {
			return State{}, err
		}
	}
	l := etcdlayout.Layout{Prefix: prefix}
	state := State{DualWrite: false, Changed: time.Now().UTC(), By: opts.By, Reason: "transition finished"}
	value, err := state.encode()
	if err != nil {
		return State{}, err
	}
	bitmapReplicas := l.AllocatorReplicasPrefix(string(model.Bitmap))
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(bitmapReplicas), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(l.AllocatorState(), string(value))).
		Else(clientv3.OpGet(bitmapReplicas, clientv3.WithPrefix(), clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return State{}, fmt.Errorf("finish transition: %w", err)
	}
	if !resp.Succeeded {
		return State{}, replicasLive(resp.Responses[0].GetResponseRange().Kvs, bitmapReplicas)
	}
	state.Revision = resp.Header.Revision
	return state, nil
}

// CheckNoBitmapWriters returns ErrBitmapWritersLive, naming them, when a
// bitmap-model replica's record is live or (unless force) a kube-apiserver
// identity lease is: what Finish refuses for. Finish checks again, the
// replicas in the transaction that writes the state; a caller with more to
// check before it finishes asks this first, so that the refusal it reports
// names the writers, which must stop before anything else can settle.
func CheckNoBitmapWriters(ctx context.Context, client *clientv3.Client, prefix string, force bool) error {
	if !force {
		if err := apiServersLive(ctx, client, prefix); err != nil {
			return err
		}
	}
	bitmapReplicas := etcdlayout.Layout{Prefix: prefix}.AllocatorReplicasPrefix(string(model.Bitmap))
	resp, err := client.Get(ctx, bitmapReplicas, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("read the bitmap-model replicas: %w", err)
	}
	if len(resp.Kvs) > 0 {
		return replicasLive(resp.Kvs, bitmapReplicas)
	}
	return nil
}

// apiServersLive is ErrBitmapWritersLive when kube-apiserver identity
// leases are live.
func apiServersLive(ctx context.Context, client *clientv3.Client, prefix string) error {
	servers, err := LiveAPIServers(ctx, client, prefix, time.Now())
	if err != nil {
		return err
	}
	if len(servers) == 0 {
		return nil
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.Name
	}
	return fmt.Errorf("%w: kube-apiserver identity leases are live (%s); a kube-apiserver ≤ 1.33 writes the bitmap. "+
		"Stop them first, or pass --force if they all run 1.34 or later", ErrBitmapWritersLive, strings.Join(names, ", "))
}

// replicasLive is ErrBitmapWritersLive naming the replicas whose record
// keys under prefix are kvs.
func replicasLive(kvs []*mvccpb.KeyValue, prefix string) error {
	ids := make([]string, len(kvs))
	for i, kv := range kvs {
		ids[i] = strings.TrimPrefix(string(kv.Key), prefix)
	}
	return fmt.Errorf("%w: bitmap-model replicas are live (%s); switch them to --allocator=ipaddress first",
		ErrBitmapWritersLive, strings.Join(ids, ", "))
}

// Resume turns dual write on again. It returns the new state; callers then
// wait for the IPAddress-model replicas (WaitForDualWriters) and carry the
// IPAddresses made while dual write was off into the bitmap.
func Resume(ctx context.Context, client *clientv3.Client, prefix, by string) (State, error) {
	l := etcdlayout.Layout{Prefix: prefix}
	state := State{DualWrite: true, Changed: time.Now().UTC(), By: by, Reason: "transition resumed"}
	value, err := state.encode()
	if err != nil {
		return State{}, err
	}
	resp, err := client.Put(ctx, l.AllocatorState(), string(value))
	if err != nil {
		return State{}, fmt.Errorf("resume transition: %w", err)
	}
	state.Revision = resp.Header.Revision
	return state, nil
}

// WaitForDualWriters blocks until every live IPAddress-model replica record
// reports dual write at the current state revision (or later), polling
// every interval, until ctx ends. It fails at once if dual write is off.
func WaitForDualWriters(ctx context.Context, client *clientv3.Client, prefix string, interval time.Duration) error {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	for {
		state, ok, err := ReadState(ctx, client, prefix)
		if err != nil {
			return err
		}
		if ok && !state.DualWrite {
			return ErrRetired
		}
		records, err := ListRecords(ctx, client, prefix, model.IPAddress)
		if err != nil {
			return err
		}
		var lagging []string
		for _, r := range records {
			if !r.DualWrite || r.StateRevision < state.Revision {
				lagging = append(lagging, r.ID)
			}
		}
		if len(lagging) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for IPAddress-model replicas to dual-write (%s have not acknowledged state revision %d): %w",
				strings.Join(lagging, ", "), state.Revision, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// WritersIgnoringScopes names the live writers on this etcd that allocate
// ClusterIPs without ServiceCIDR scopes (design.md §11): bitmap-model
// replicas of this server, and kube-apiservers (by identity lease), whose
// allocators know nothing of scope annotations.
func WritersIgnoringScopes(ctx context.Context, client *clientv3.Client, prefix string, now time.Time) ([]string, error) {
	records, err := ListRecords(ctx, client, prefix, model.Bitmap)
	if err != nil {
		return nil, err
	}
	out := []string{} // looked, found none: not nil
	for _, r := range records {
		out = append(out, fmt.Sprintf("bitmap-model replica %s", r.ID))
	}
	apiservers, err := LiveAPIServers(ctx, client, prefix, now)
	if err != nil {
		return nil, err
	}
	for _, a := range apiservers {
		out = append(out, fmt.Sprintf("kube-apiserver %s", a.Name))
	}
	return out, nil
}
