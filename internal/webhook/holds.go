package webhook

import (
	"context"
	"net/netip"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/subrange"
)

// DefaultHold is how long a picked address stays out of the webhook's
// picks while kube-apiserver has not stored its IPAddress: the leak grace
// (allocation.LeakGrace), longer than the request that carries the pick
// can run, so a slow create's address is not picked again before its
// IPAddress lands; a create refused later frees it after that.
const DefaultHold = allocation.LeakGrace

// hold is one address the webhook handed out.
type hold struct {
	owner     string // namespace/name of the Service it was picked for
	expires   time.Time
	forget    func(netip.Addr) // the family allocator's Forget
	generated bool             // the Service had only generateName: no name to compare
}

// holds are the ipaddress.Objects of the webhook's allocators: a claim
// stores nothing (kube-apiserver stores the IPAddress when it allocates the
// picked address as the user's), it holds the address for DefaultHold. A
// hold ends when the informer sees an IPAddress for the address (the
// Service's: the pick was claimed; another's: kube-apiserver gave the
// address to a Service of another webhook replica, and refused ours), or
// when it expires with no IPAddress seen, when the address is forgotten.
type holds struct {
	lister networkinglisters.IPAddressLister
	ttl    time.Duration
	now    func() time.Time
	picks  *pickCounts

	mu   sync.Mutex
	byIP map[netip.Addr]*hold // guarded by mu
}

func newHolds(lister networkinglisters.IPAddressLister, ttl time.Duration, picks *pickCounts) *holds {
	if ttl <= 0 {
		ttl = DefaultHold
	}
	return &holds{lister: lister, ttl: ttl, now: time.Now, picks: picks, byIP: map[netip.Addr]*hold{}}
}

// forFamily returns the Objects of one family's allocator, whose Forget
// ends that family's expired holds.
func (h *holds) forFamily(forget func(netip.Addr)) ipaddress.Objects {
	return familyHolds{h: h, forget: forget}
}

type familyHolds struct {
	h      *holds
	forget func(netip.Addr)
}

// Get reads the IPAddress from the informer's cache.
func (f familyHolds) Get(_ context.Context, name string, _ metav1.GetOptions) (*networkingv1.IPAddress, error) {
	return f.h.lister.Get(name)
}

// Create holds the address of obj for the Service its parentRef names. An
// address the cache already holds, or another pick holds, is taken.
func (f familyHolds) Create(_ context.Context, obj *networkingv1.IPAddress, _ metav1.CreateOptions) (*networkingv1.IPAddress, error) {
	ip, err := subrange.ParseAddr(obj.Name)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if _, err := f.h.lister.Get(obj.Name); err == nil {
		return nil, apierrors.NewAlreadyExists(networkingv1.Resource("ipaddresses"), obj.Name)
	}
	owner, generated := "", true
	if p := obj.Spec.ParentRef; p != nil && p.Name != "" {
		owner, generated = p.Namespace+"/"+p.Name, false
	}
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.byIP[ip]; ok && (cur.generated || cur.owner != owner) && h.now().Before(cur.expires) {
		return nil, apierrors.NewAlreadyExists(networkingv1.Resource("ipaddresses"), obj.Name)
	}
	h.byIP[ip] = &hold{owner: owner, expires: h.now().Add(h.ttl), forget: f.forget, generated: generated}
	return obj, nil
}

// Delete does nothing: the webhook releases nothing; kube-apiserver does.
func (familyHolds) Delete(context.Context, string, metav1.DeleteOptions) error { return nil }

// observed ends the hold of an IPAddress the informer added, and counts
// what became of the pick.
func (h *holds) observed(obj any) {
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	ip, err := subrange.ParseAddr(ipa.Name)
	if err != nil {
		return
	}
	h.mu.Lock()
	cur, held := h.byIP[ip]
	delete(h.byIP, ip)
	h.mu.Unlock()
	if !held {
		return
	}
	switch p := ipa.Spec.ParentRef; {
	case cur.generated || p == nil || p.Namespace+"/"+p.Name == cur.owner:
		h.picks.add(outcomeClaimed)
	default:
		h.picks.add(outcomeTaken)
	}
}

// handlers are the informer handlers that end holds.
func (h *holds) handlers() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: h.observed}
}

// expire forgets the picks whose hold ended with no IPAddress seen; it
// returns how many.
func (h *holds) expire() int {
	now := h.now()
	var gone []struct {
		ip     netip.Addr
		forget func(netip.Addr)
	}
	h.mu.Lock()
	for ip, cur := range h.byIP {
		if now.After(cur.expires) {
			delete(h.byIP, ip)
			gone = append(gone, struct {
				ip     netip.Addr
				forget func(netip.Addr)
			}{ip, cur.forget})
		}
	}
	h.mu.Unlock()
	for _, g := range gone {
		g.forget(g.ip)
		h.picks.add(outcomeUnclaimed)
	}
	return len(gone)
}

// run expires holds every second until ctx ends.
func (h *holds) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.expire()
		}
	}
}

// held is how many picks are held now.
func (h *holds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byIP)
}
