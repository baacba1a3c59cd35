package renumber

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/internal/webhook/drypick"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// CaptureWarnings makes the clients built from cfg hand renumber the
// warning by which the allocator's admission webhook names what a dry-run
// create would get (drypick); every other warning goes where it went
// before (logged, by default). Build Config.Client from cfg after it: a
// kube-apiserver's dry run picks no real address, so without the warning a
// renumber through it cannot learn where a re-create would land.
func CaptureWarnings(cfg *rest.Config) {
	next := cfg.WarningHandlerWithContext
	if next == nil && cfg.WarningHandler != nil {
		next = legacyWarnings{cfg.WarningHandler}
	}
	if next == nil {
		next = rest.WarningLogger{}
	}
	cfg.WarningHandlerWithContext = captured{next: next}
	cfg.WarningHandler = nil
}

type legacyWarnings struct{ h rest.WarningHandler }

func (l legacyWarnings) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	l.h.HandleWarningHeader(code, agent, text)
}

// captured hands a drypick warning to the sink in the request's context,
// and any other warning to next.
type captured struct {
	next rest.WarningHandlerWithContext
}

func (c captured) HandleWarningHeaderWithContext(ctx context.Context, code int, agent, text string) {
	if s, ok := ctx.Value(sinkKey{}).(*pickSink); ok {
		if picks, ok := drypick.Parse(text); ok {
			s.set(picks)
			return
		}
	}
	c.next.HandleWarningHeaderWithContext(ctx, code, agent, text)
}

type sinkKey struct{}

// pickSink receives the webhook's picks of one dry run.
type pickSink struct {
	mu    sync.Mutex
	picks []netip.Addr // guarded by mu
}

func (s *pickSink) set(picks []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.picks = picks
}

func (s *pickSink) get() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.picks
}

// dryRunCreate runs a server-side dry run of probe and returns the Service
// the create would store, corrected for a kube-apiserver behind the
// allocator's webhook: the addresses the webhook names (drypick) replace
// those of the answer, which kube-apiserver's dry run does not pick. The
// webhook names only the addresses it picked, so requested ones stay.
func (r *runner) dryRunCreate(ctx context.Context, probe *corev1.Service) (*corev1.Service, error) {
	sink := &pickSink{}
	got, err := r.client.CoreV1().Services(probe.Namespace).Create(context.WithValue(ctx, sinkKey{}, sink), probe,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	picks := sink.get()
	if len(picks) == 0 {
		return got, nil
	}
	got = got.DeepCopy()
	asked := holding.IPs(probe)
	for i, text := range got.Spec.ClusterIPs {
		ip, ok := holding.ParseClusterIP(text)
		if !ok || slices.Contains(asked, ip) {
			continue
		}
		for _, p := range picks {
			if p.Is6() == ip.Is6() {
				got.Spec.ClusterIPs[i] = p.String()
			}
		}
	}
	if len(got.Spec.ClusterIPs) > 0 {
		got.Spec.ClusterIP = got.Spec.ClusterIPs[0]
	}
	return got, nil
}

// checkPinned is the dry run of a probe with pins, for an API server whose
// dry run checks a requested address against one of its ServiceCIDRs only
// (kube-apiserver, which picks that one at random and refuses an address
// of any other as "not in the valid range"): when that is the refusal and
// every pin lies in a ServiceCIDR that takes new addresses, the probe is
// tried again without the pins (everything but the addresses checked), and
// each pin is checked free by reading its IPAddress. A pin taken meanwhile
// is refused at the create, which takes fresh ones (create).
func (r *runner) checkPinned(ctx context.Context, c Candidate, pins Pins) (*corev1.Service, error) {
	probed, err := r.dryRunCreate(ctx, Probe(c, pins))
	if err == nil || len(pins) == 0 || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "is not in the valid range") {
		return probed, err
	}
	open, lerr := r.openPrefixes(ctx)
	if lerr != nil {
		return nil, lerr
	}
	for _, pin := range pins {
		if !inAny(open, pin) {
			return nil, err
		}
	}
	if probed, err = r.dryRunCreate(ctx, Probe(c, nil)); err != nil {
		return nil, err
	}
	for _, pin := range pins {
		_, gerr := r.client.NetworkingV1().IPAddresses().Get(ctx, pin.String(), metav1.GetOptions{})
		switch {
		case gerr == nil:
			// The text of the API's refusal, which planMove and takenOffset read.
			return nil, fmt.Errorf("failed to allocate IP %s: provided IP is already allocated (its IPAddress exists)", pin)
		case !apierrors.IsNotFound(gerr):
			return nil, fmt.Errorf("read the IPAddress of %s: %w", pin, gerr)
		}
	}
	return probed, nil
}

func inAny(ps []netip.Prefix, addr netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// checkPick refuses a dry run's pick that no open ServiceCIDR would hand
// out: a network or IPv4 broadcast address, or an address outside every
// open ServiceCIDR. kube-apiserver's dry run answers such an address (the
// first of one of its ranges, whatever is free, draining or scoped) unless
// the allocator's webhook names the real pick (CaptureWarnings); a re-create
// pinned to it would be refused after the Service was deleted.
func (r *runner) checkPick(ctx context.Context, ip netip.Addr) error {
	open, err := r.openPrefixes(ctx)
	if err != nil {
		return err
	}
	for _, p := range open {
		if rng, err := subrange.New(p, model.IPAddress); err == nil && rng.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("the API server's dry run of its re-create names %s, an address no open ServiceCIDR hands out "+
		"(kube-apiserver's dry run picks no real address; in front of it, the allocator webhook names one): give --to", ip)
}
