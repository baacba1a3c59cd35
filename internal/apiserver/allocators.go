package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair/report"
)

// ReasonServiceCIDRNotServed is the reason of the event on a ServiceCIDR the
// IPAddress allocator refuses to serve.
const ReasonServiceCIDRNotServed = "ServiceCIDRNotServed"

// openBackend builds the server's ClusterIP allocator model
// (internal/ipallocator): the one place the model's name becomes allocators,
// stores, repairs and carry-over. The server is not serving yet; the
// IPAddress model's informers sync once it does, and until then its
// allocators answer ErrNotReady (503 with Retry-After). They stop when ctx
// ends. The allocators claim and release IPAddresses through objects, the
// server's own storage: an allocation is one etcd write, not a second API
// request over loopback (that hop would be half of a create's CPU).
func (s *Server) openBackend(ctx context.Context, objects ipaddress.Objects) (*ipallocator.Backend, error) {
	client, err := loopbackClient(s.cfg.Generic.LoopbackClientConfig)
	if err != nil {
		return nil, err
	}
	// A ServiceCIDR the allocator cannot serve (an IPv6 prefix shorter than
	// /64) is accepted by the API like upstream's, so the refusal is made
	// visible as a Warning event on it, with upstream's message.
	recorder := report.NewEventRecorder(ctx, client)
	onRefused := func(r ipaddress.RefusedCIDR) {
		obj := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: r.ServiceCIDR}}
		recorder.Eventf(obj, corev1.EventTypeWarning, ReasonServiceCIDRNotServed, "CIDR %s is not served: %v", r.CIDR, r.Err)
	}
	cfg := ipallocator.Config{
		Model: s.cfg.Model, Prefixes: s.cfg.ServiceCIDRs, Etcd: s.etcd, EtcdPrefix: s.cfg.EtcdPrefix,
		Client: client, IPAddresses: objects, Transition: s.transition, OnRefused: onRefused,
	}
	s.informers = sharedInformers(ctx, client, s.sources, cfg.ReadsServices())
	if cfg.ReadsServices() {
		s.serviceInformer = s.informers.Core().V1().Services().Informer()
	}
	cfg.Informers = s.informers
	if s.cfg.InMemory {
		cfg.Etcd = nil
	}
	b, err := ipallocator.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s model: %w", s.cfg.Model, err)
	}
	return b, nil
}

// sharedInformers is the server's one informer factory: the allocators of
// both families, the repairs and the ServiceCIDR controller share its
// caches and watches, so every IPAddress is decoded and held once (one
// factory each would hold it four times: gigabytes at 100,000 dual-stack
// Services, hack/scale.sh). Its objects carry no managedFields, which none
// of them reads (an update from a cached object keeps the stored ones), and
// its Services only the fields their readers read (informerTransform).
// Every informer the server will use (Services and Namespaces, for scopes,
// only when an IPAddress allocator or repair may run) is registered and
// started here, for the server's lifetime:
// otherwise one first started by a shorter-lived user (the transition
// repair, which runs only while dual write is on) would stop with it and
// stay dead in the factory. They list and watch the server's own stores in
// process (srcs), and sync once those exist and their watch caches are
// ready.
func sharedInformers(ctx context.Context, client kubernetes.Interface, srcs *inProcessSources, services bool) informers.SharedInformerFactory {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(informerTransform))
	inProcessInformers(factory, srcs)
	factory.Networking().V1().IPAddresses().Informer()
	factory.Networking().V1().ServiceCIDRs().Informer()
	if services {
		factory.Core().V1().Services().Informer()
		factory.Core().V1().Namespaces().Informer()
	}
	factory.Start(ctx.Done())
	return factory
}

// loopbackClient is a protobuf client on the server's loopback config: every
// dynamic allocation of the IPAddress model is one IPAddress create through
// it, and its informers list and watch through it.
func loopbackClient(loopback *restclient.Config) (kubernetes.Interface, error) {
	return newLoopbackClient(loopback, nil)
}

// newLoopbackClient is a protobuf client on a copy of the loopback config,
// its transport wrapped by wrap when wrap is not nil.
func newLoopbackClient(loopback *restclient.Config, wrap transport.WrapperFunc) (kubernetes.Interface, error) {
	if loopback == nil {
		return nil, fmt.Errorf("no loopback client config")
	}
	cfg := restclient.CopyConfig(loopback)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("loopback client: %w", err)
	}
	return client, nil
}
