package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/servicealloc"
	"github.com/allocator/allocator/pkg/subrange"
)

// Config is what New needs.
type Config struct {
	// Client talks to the kube-apiserver the webhook serves.
	Client kubernetes.Interface
	// Hold is how long a picked address is held while kube-apiserver has
	// not stored its IPAddress (default DefaultHold).
	Hold time.Duration
	// Policy is the ServiceCIDR guardrails and warnings.
	Policy servicecidrs.Policy
	// Namespace and Identity name this replica's member Lease, through
	// which the replicas spread their picks (members.go); either empty:
	// this replica picks anywhere.
	Namespace, Identity string

	// Conditions makes the webhook write our ServiceCIDR conditions
	// (capacity, lifecycle, overlap) into servicecidrs/status, as serve's
	// controller does, leaving the finalizer and Ready to
	// kube-controller-manager.
	Conditions bool

	// Stripe, when Of is above 1, fixes this replica's stripe (its Index of
	// Of replicas) instead of counting the member Leases: replicas with
	// stable ordinals (a StatefulSet), or an API server that serves no
	// Leases.
	Stripe Stripe
}

// Stripe is a replica's share of each range: the addresses whose offset is
// Index modulo Of.
type Stripe struct{ Index, Of int }

// pickTries bounds the candidates a replica passes over to find one of its
// stripe before it picks anywhere: with n replicas a candidate is in the
// stripe about once in n, so 64 misses in a row mean the stripe is full.
const pickTries = 64

// Webhook answers kube-apiserver's admission requests for Services and
// ServiceCIDRs. It is safe for concurrent use.
type Webhook struct {
	alloc    *servicealloc.Allocator
	families []*ipaddress.Allocator
	holds    *holds
	cidrs    servicecidrs.Admission
	counts   *pickCounts
	members  *members // nil: no Lease, picks anywhere
	log      klog.Logger
}

// maxReviewBytes bounds an AdmissionReview's body: kube-apiserver sends at
// most its own request limit (3 MiB) plus the review around it.
const maxReviewBytes = 7 << 20

// New reads the cluster's families from the default ServiceCIDR
// ("kubernetes", which kube-apiserver 1.33 and later keeps from its
// --service-cluster-ip-range, primary family first), starts the informers
// of IPAddresses, ServiceCIDRs and Namespaces, and returns at once; the
// Webhook is ready (Ready) once they have synced. Cancel ctx to stop it.
func New(ctx context.Context, cfg Config) (*Webhook, error) {
	if cfg.Client == nil {
		return nil, errors.New("webhook: no client")
	}
	def, err := cfg.Client.NetworkingV1().ServiceCIDRs().Get(ctx, servicecidr.DefaultName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the default ServiceCIDR %q (the webhook needs kube-apiserver 1.33 or later, which keeps it): %w",
			servicecidr.DefaultName, err)
	}
	factory := informers.NewSharedInformerFactory(cfg.Client, 0)
	counts := newPickCounts()
	ipInf := factory.Networking().V1().IPAddresses()
	h := newHolds(ipInf.Lister(), cfg.Hold, counts)
	if _, err := ipInf.Informer().AddEventHandler(h.handlers()); err != nil {
		return nil, fmt.Errorf("webhook: watch IPAddresses: %w", err)
	}
	w := &Webhook{holds: h, counts: counts, log: klog.FromContext(ctx).WithName("webhook")}
	switch {
	case cfg.Stripe.Of > 1:
		w.members = &members{k: cfg.Stripe.Index, n: cfg.Stripe.Of, active: true}
	case cfg.Namespace != "" && cfg.Identity != "":
		w.members = newMembers(cfg.Client, cfg.Namespace, cfg.Identity, w.log)
		go w.members.run(ctx)
	}
	var allocs []allocation.Interface
	for _, cidr := range def.Spec.CIDRs {
		p, err := subrange.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("the default ServiceCIDR's %q: %w", cidr, err)
		}
		var a *ipaddress.Allocator
		objects := h.forFamily(func(ip netip.Addr) { a.Forget(ip) })
		a, err = ipaddress.New(ctx, ipaddress.Config{Client: cfg.Client, IPv6: p.Addr().Is6(), Informers: factory, Objects: objects,
			MaxCollisions: pickTries})
		if err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
		w.families = append(w.families, a)
		allocs = append(allocs, recording{Interface: a, family: a, members: w.members})
	}
	w.alloc, err = servicealloc.New(servicealloc.Config{Allocators: allocs, NodePorts: newPassPorts()})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if w.cidrs, err = servicecidrs.NewAdmission(cfg.Policy, factory.Networking().V1().ServiceCIDRs()); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if cfg.Conditions {
		ctrl, err := servicecidr.New(cfg.Client, factory.Networking().V1().ServiceCIDRs(), ipInf, servicecidr.WithConditionsOnly())
		if err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
		go func() {
			if err := ctrl.Run(ctx, 1); err != nil {
				w.log.Error(err, "The ServiceCIDR conditions controller stopped")
			}
		}()
	}
	factory.Start(ctx.Done())
	go h.run(ctx)
	return w, nil
}

// Stripe returns this replica's stripe; Of is 1 when it picks anywhere.
func (w *Webhook) Stripe() Stripe {
	k, n := w.members.stripe()
	return Stripe{Index: k, Of: n}
}

// Held is how many picked addresses are held, waiting for kube-apiserver's
// IPAddress.
func (w *Webhook) Held() int { return w.holds.held() }

// Serves reports whether the replica's allocator of p's family serves p: a
// ready ServiceCIDR holds it and the informer has it.
func (w *Webhook) Serves(ctx context.Context, p netip.Prefix) bool {
	for _, a := range w.families {
		if a.IPv6() != p.Addr().Is6() {
			continue
		}
		usage, err := a.UsageByCIDR(ctx)
		if err != nil {
			return false
		}
		_, ok := usage[p]
		return ok
	}
	return false
}

// Ready reports whether every family's allocator has synced.
func (w *Webhook) Ready() bool {
	for _, a := range w.families {
		if !a.Ready() {
			return false
		}
	}
	return true
}

// Paths the webhook serves.
const (
	ServicesPath     = "/mutate-services"
	ServiceCIDRsPath = "/validate-servicecidrs"
)

// Handler serves the admission endpoints, /healthz, /readyz and /metrics.
func (w *Webhook) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(ServicesPath, w.review("services", w.admitService))
	mux.HandleFunc(ServiceCIDRsPath, w.review("servicecidrs", w.admitServiceCIDR))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok") })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !w.Ready() {
			http.Error(rw, "the allocators' informers have not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, "ok")
	})
	mux.Handle("/metrics", w.counts.handler())
	return mux
}

// review decodes an AdmissionReview, answers its request with admit, and
// encodes the review back.
func (w *Webhook) review(resource string, admit func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(rw, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(io.LimitReader(r.Body, maxReviewBytes)).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, fmt.Sprintf("decode the AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp := admit(r.Context(), review.Request)
		resp.UID = review.Request.UID
		w.counts.answered(resource, result(resp))
		review.Response, review.Request = resp, nil
		rw.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(rw).Encode(&review); err != nil {
			w.log.Error(err, "Could not answer an admission request", "resource", resource)
		}
	}
}

func result(r *admissionv1.AdmissionResponse) string {
	switch {
	case r.Allowed && r.Patch != nil:
		return "patched"
	case r.Allowed:
		return "allowed"
	case r.Result != nil && r.Result.Code >= 500:
		return "error"
	}
	return "denied"
}
