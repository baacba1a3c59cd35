package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/invariants"
)

// namespace holds every Service the harness writes.
const namespace = metav1.NamespaceDefault

// shape is what a Service asks for when it is created.
type shape struct {
	typ      corev1.ServiceType
	local    bool                  // LoadBalancer with externalTrafficPolicy Local: a health-check node port
	policy   corev1.IPFamilyPolicy // "" is the server's default, SingleStack
	families []corev1.IPFamily     // nil is the server's default
}

// newService is a Service named name of the shape s, with one TCP port.
func newService(name string, s shape) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:       s.typ,
			Selector:   map[string]string{"app": name},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
			IPFamilies: s.families,
		},
	}
	if s.policy != "" {
		svc.Spec.IPFamilyPolicy = &s.policy
	}
	if s.local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return svc
}

// update is a change of a live Service that allocates: its merge patch and
// the shape it leaves.
type update struct {
	patch []byte
	after shape
}

// updatesOf are the allocating updates a Service of shape s can take in
// configuration c: ClusterIP→NodePort (NodePort workload) and
// SingleStack→PreferDualStack (dual-stack).
func updatesOf(c config, s shape) []update {
	var out []update
	if c.workload == nodePorts && s.typ == corev1.ServiceTypeClusterIP {
		after := s
		after.typ = corev1.ServiceTypeNodePort
		out = append(out, update{patch: []byte(`{"spec":{"type":"NodePort"}}`), after: after})
	}
	if c.dualStack && s.policy != corev1.IPFamilyPolicyPreferDualStack {
		after := s
		after.policy = corev1.IPFamilyPolicyPreferDualStack
		out = append(out, update{patch: []byte(`{"spec":{"ipFamilyPolicy":"PreferDualStack"}}`), after: after})
	}
	return out
}

// createShape picks the shape of a phase-1 create.
func createShape(c config, rnd *rand.Rand) shape {
	s := shape{typ: corev1.ServiceTypeClusterIP}
	if c.workload == nodePorts {
		switch r := rnd.IntN(5); {
		case r < 2:
			s.typ = corev1.ServiceTypeNodePort
		case r < 3:
			s.typ, s.local = corev1.ServiceTypeLoadBalancer, true
		}
	}
	if c.dualStack && rnd.IntN(3) == 0 {
		s.policy = corev1.IPFamilyPolicyPreferDualStack
	}
	return s
}

// live is a Service a worker may still write: acknowledged, and no write of
// it failed.
type live struct {
	name  string
	shape shape
}

// worker writes Services of its own through one replica.
type worker struct {
	id     int
	cfg    config
	client kubernetes.Interface // phase-1 client: one-second timeout
	ledger *ledger
	rnd    *rand.Rand
	live   []live
	// full: the last create or update found its range full, so the next
	// write is a delete; the workload churns at a full range, where a
	// released address is handed out again at once.
	full bool
}

// fullBackoff is how long a worker waits after a full range when it has
// nothing to delete.
const fullBackoff = 200 * time.Millisecond

// run writes until ops writes were sent (a back-off counts as one) or stop
// ends. Requests run under ctx, not stop, so that the end of the phase does
// not cut one short.
func (w *worker) run(ctx, stop context.Context, ops int) {
	for i := 0; i < ops && stop.Err() == nil && ctx.Err() == nil; i++ {
		r := w.rnd.Float64()
		switch {
		case w.full && len(w.live) == 0:
			// Nothing of its own to delete: back off as a client would,
			// rather than spend the writes on refusals.
			w.full = false
			sleep(stop, fullBackoff)
		case w.full:
			w.full = false
			w.delete(ctx)
		case len(w.live) > 0 && r < 0.3:
			w.update(ctx)
		case len(w.live) > 0 && r < 0.5:
			w.delete(ctx)
		default:
			w.create(ctx, fmt.Sprintf("w%02d-%03d", w.id, i))
		}
	}
}

func (w *worker) create(ctx context.Context, name string) {
	s := createShape(w.cfg, w.rnd)
	got, err := w.client.CoreV1().Services(namespace).Create(ctx, newService(name, s), metav1.CreateOptions{})
	key := namespace + "/" + name
	if err != nil {
		w.ledger.failedWrite(key, opCreate, err)
		w.full = strings.Contains(err.Error(), "range is full")
		return
	}
	w.ledger.acked(key, opCreate, invariants.HoldingOf(got))
	w.live = append(w.live, live{name: name, shape: s})
}

// update applies one allocating update to a random live Service; with none
// possible it deletes instead.
func (w *worker) update(ctx context.Context) {
	i := w.rnd.IntN(len(w.live))
	ups := updatesOf(w.cfg, w.live[i].shape)
	if len(ups) == 0 {
		w.delete(ctx)
		return
	}
	up := ups[w.rnd.IntN(len(ups))]
	name := w.live[i].name
	got, err := w.client.CoreV1().Services(namespace).Patch(ctx, name, types.MergePatchType, up.patch, metav1.PatchOptions{})
	if err != nil {
		w.ledger.failedWrite(namespace+"/"+name, opUpdate, err)
		w.full = strings.Contains(err.Error(), "range is full")
		w.drop(i)
		return
	}
	w.ledger.acked(namespace+"/"+name, opUpdate, invariants.HoldingOf(got))
	w.live[i].shape = up.after
}

func (w *worker) delete(ctx context.Context) {
	i := w.rnd.IntN(len(w.live))
	name := w.live[i].name
	err := w.client.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil {
		w.ledger.failedWrite(namespace+"/"+name, opDelete, err)
	} else {
		w.ledger.acked(namespace+"/"+name, opDelete, invariants.Holding{})
	}
	w.drop(i)
}

// drop forgets live Service i.
func (w *worker) drop(i int) {
	w.live[i] = w.live[len(w.live)-1]
	w.live = w.live[:len(w.live)-1]
}

// fillResult is what one fill of a range did.
type fillResult struct {
	created int
	full    bool  // a create answered "range is full"
	lastErr error // the last other error, when the fill gave up
}

// fill creates Services of shape s through the clients (one filler per
// client, each on its own names) until one answers "range is full", at most
// limit creates in all; acknowledged creates go to the ledger (not counted
// as sent), and so do failures other than a full range. A filler gives up after maxErrs other errors in a row. A full
// range stops the other fillers after their create in flight, not during it:
// a create cut short is a write of unknown outcome, which the fill must not
// add.
func fill(ctx context.Context, clients []kubernetes.Interface, l *ledger, prefix string, s shape, limit int) fillResult {
	const maxErrs = 5
	var (
		mu  sync.Mutex
		res fillResult
		n   int // creates sent; guarded by mu
		wg  sync.WaitGroup
	)
	for f, c := range clients {
		wg.Go(func() {
			errs := 0
			for i := 0; ctx.Err() == nil; i++ {
				mu.Lock()
				if n >= limit || res.full {
					mu.Unlock()
					return
				}
				n++
				mu.Unlock()
				name := fmt.Sprintf("%s-%d-%04d", prefix, f, i)
				got, err := c.CoreV1().Services(namespace).Create(ctx, newService(name, s), metav1.CreateOptions{})
				key := namespace + "/" + name
				if err == nil {
					l.filled(key, invariants.HoldingOf(got))
					mu.Lock()
					res.created++
					mu.Unlock()
					errs = 0
					continue
				}
				mu.Lock()
				if strings.Contains(err.Error(), "range is full") {
					res.full = true
					mu.Unlock()
					return
				}
				res.lastErr = err
				mu.Unlock()
				l.failedWrite(key, opCreate, err)
				if errs++; errs >= maxErrs {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	return res
}
