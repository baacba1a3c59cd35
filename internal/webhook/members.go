package webhook

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// How the replicas spread their picks. Each replica renews a Lease of its
// own (labelled memberLabel) in its namespace and reads the others'; the
// live members, sorted by name, give each replica an index k of n, and it
// prefers the addresses whose offset in their range is k modulo n: two
// replicas then never pick one address while both have room in their own
// stripe, which fills as evenly as the range. A replica alone, or one that
// cannot read the Leases, picks anywhere.
const (
	memberLabel    = "allocator.github.io/webhook-member"
	memberDuration = 30 * time.Second
	memberRenew    = 10 * time.Second
	// memberRecount is how often the Leases are read again: a replica
	// that starts is counted by the others within it.
	memberRecount = 2 * time.Second
)

// members is a replica's view of the live replicas.
type members struct {
	client    kubernetes.Interface
	namespace string
	identity  string
	log       klog.Logger

	mu     sync.Mutex
	k, n   int // this replica's index and the number of live replicas; guarded by mu
	active bool
}

func newMembers(client kubernetes.Interface, namespace, identity string, log klog.Logger) *members {
	return &members{client: client, namespace: namespace, identity: identity, log: log, n: 1}
}

// stripe returns this replica's index k and the number of replicas n.
func (m *members) stripe() (k, n int) {
	if m == nil {
		return 0, 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.k, m.n
}

// run renews this replica's Lease every memberRenew and recounts the
// members every memberRecount until ctx ends; its Lease is deleted then.
func (m *members) run(ctx context.Context) {
	t := time.NewTicker(memberRecount)
	defer t.Stop()
	var renewed time.Time
	for {
		var err error
		if time.Since(renewed) >= memberRenew {
			if err = m.renew(ctx); err == nil { // renew recounts
				renewed = time.Now()
			}
		} else {
			err = m.recount(ctx)
		}
		if err != nil && ctx.Err() == nil {
			m.log.V(2).Info("Cannot renew the webhook's member Lease; picking anywhere", "err", err)
			m.mu.Lock()
			m.k, m.n = 0, 1
			m.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.client.CoordinationV1().Leases(m.namespace).Delete(dctx, m.leaseName(), metav1.DeleteOptions{})
			cancel()
			return
		case <-t.C:
		}
	}
}

func (m *members) leaseName() string { return "allocator-webhook-" + m.identity }

// renew writes this replica's Lease and reads the live ones.
func (m *members) renew(ctx context.Context) error {
	leases := m.client.CoordinationV1().Leases(m.namespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Labels: map[string]string{memberLabel: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.identity, RenewTime: &now,
				LeaseDurationSeconds: ptr.To(int32(memberDuration / time.Second))},
		}, metav1.CreateOptions{})
	case err == nil:
		lease.Spec.RenewTime = &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	return m.recount(ctx)
}

// recount reads the live Leases and takes this replica's index among them.
func (m *members) recount(ctx context.Context) error {
	list, err := m.client.CoordinationV1().Leases(m.namespace).List(ctx, metav1.ListOptions{LabelSelector: memberLabel + "=true"})
	if err != nil {
		return err
	}
	var live []string
	for _, l := range list.Items {
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			continue
		}
		if time.Since(l.Spec.RenewTime.Time) <= memberDuration || *l.Spec.HolderIdentity == m.identity {
			live = append(live, *l.Spec.HolderIdentity)
		}
	}
	slices.Sort(live)
	live = slices.Compact(live)
	k := slices.Index(live, m.identity)
	m.mu.Lock()
	defer m.mu.Unlock()
	if k < 0 {
		m.k, m.n = 0, 1
		return nil
	}
	if !m.active || m.k != k || m.n != len(live) {
		m.log.Info("Webhook replicas counted; this one prefers its stripe of each range", "replica", m.identity, "index", k, "replicas", len(live))
	}
	m.k, m.n, m.active = k, len(live), true
	return nil
}

// otherStripes is the ipaddress.Excluded of a replica's preferred picks:
// every address whose offset from its range's network address is not k
// modulo n. Offsets are counted from the address's /64 (IPv6) or the
// whole address (IPv4), which every range of the family shares.
type otherStripes struct{ k, n int }

func (s otherStripes) Contains(ip netip.Addr) bool {
	b := ip.As16()
	low := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
		uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	return int(low%uint64(s.n)) != s.k
}

func (otherStripes) ContainsPrefix(netip.Prefix) bool { return false }
