package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/repair/report"
)

// DefaultServiceCIDRName is the ServiceCIDR created from --service-cluster-ip-range.
const DefaultServiceCIDRName = servicecidr.DefaultName

// defaultServiceCIDRInterval is how often the default ServiceCIDR is checked
// (and re-created if someone deleted it).
const defaultServiceCIDRInterval = 10 * time.Second

// runBootstrap brings the cluster to the state a control plane starts from:
// namespaces default and kube-system; the default ServiceCIDR; the other
// model's allocations carried over (in the IPAddress model by the repair's
// first pass, awaitCarryOverPass) and allocations rebuilt from stored
// Services (when configured) before the allocators open; the kubernetes
// Service with network+1 of the primary range.
// It retries until done or ctx ends. It never returns an error, because a
// failed post-start hook stops the process; until it returns, /readyz reports
// the hook as not finished.
func (s *Server) runBootstrap(ctx context.Context, loopback *restclient.Config) error {
	log := logger(ctx)
	client, err := controllerClient(loopback)
	if err != nil {
		log.Error(err, "Bootstrap cannot build a client")
		return nil
	}
	s.recorder = report.NewEventRecorder(ctx, client)
	rebuilt := !s.cfg.RebuildAllocations
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := s.bootstrapOnce(ctx, client, &rebuilt); err != nil {
			log.Info("Bootstrap step failed, retrying", "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil // shutting down
	}
	log.Info("Bootstrap done")
	go func() {
		select {
		case <-s.repairFirstPass:
			close(s.started)
		case <-ctx.Done():
		}
	}()
	s.controllers.run(ctx, func(ctx context.Context) { s.keepDefaultServiceCIDR(ctx, client) })
	return nil
}

func (s *Server) bootstrapOnce(ctx context.Context, client kubernetes.Interface, rebuilt *bool) error {
	for _, name := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	// The default ServiceCIDR comes first: the IPAddress model serves only
	// addresses inside a ServiceCIDR, the carry-over below included.
	cidrVersion, err := s.ensureDefaultServiceCIDR(ctx, client)
	if err != nil {
		return err
	}
	if err := s.markModel(ctx, client); err != nil {
		return err
	}
	if !s.migrated && !s.cfg.ManualRepair {
		if err := s.migrateFromOtherModel(ctx); err != nil {
			return err
		}
		s.migrated = true
	}
	if err := s.awaitCarryOverPass(ctx, cidrVersion); err != nil {
		return err
	}
	if !*rebuilt {
		if err := s.rebuildAllocations(ctx, client); err != nil {
			return err
		}
		*rebuilt = true
	}
	s.alloc.Open()
	s.open.Store(true)
	s.waitUntilServed(ctx, s.cfg.ServiceCIDRs[0].Addr().Next())
	return s.ensureKubernetesService(ctx, client, true)
}

// rebuildAllocations marks the cluster IPs of every stored Service in the
// allocators. Addresses already marked are fine; addresses outside the
// ranges are logged (repair reports them).
func (s *Server) rebuildAllocations(ctx context.Context, client kubernetes.Interface) error {
	list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	byV6 := map[bool]allocation.Interface{}
	for _, a := range s.allocators {
		byV6[a.IPv6()] = a
	}
	for i := range list.Items {
		svc := &list.Items[i]
		owner := allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)}
		for _, addr := range holding.IPs(svc) {
			a := byV6[addr.Is6()]
			if a == nil {
				continue
			}
			err = a.Allocate(ctx, addr, owner)
			switch {
			case err == nil, errors.Is(err, allocation.ErrAllocated):
			case errors.Is(err, allocation.ErrNotInRange), errors.Is(err, allocation.ErrMismatchedNetwork):
				logger(ctx).Info("Stored Service has a cluster IP outside the service ranges", "service", owner, "ip", addr)
			default:
				return fmt.Errorf("re-mark %s of %s: %w", addr, owner, err)
			}
		}
	}
	return nil
}

func (s *Server) defaultCIDRs() []string {
	out := make([]string, len(s.cfg.ServiceCIDRs))
	for i, p := range s.cfg.ServiceCIDRs {
		out[i] = p.String()
	}
	return out
}

// ensureDefaultServiceCIDR creates the default ServiceCIDR, or grows it from
// single- to dual-stack when the flag gained the other family. Any other
// difference is left alone and logged: shrinking or moving the range would
// strand allocated addresses. It returns the resourceVersion it wrote or
// read, "" when another server created the object meanwhile.
func (s *Server) ensureDefaultServiceCIDR(ctx context.Context, client kubernetes.Interface) (string, error) {
	want := s.defaultCIDRs()
	api := client.NetworkingV1().ServiceCIDRs()
	sc, err := api.Get(ctx, DefaultServiceCIDRName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		sc = &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceCIDRName, Annotations: s.modelAnnotations()},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: want},
		}
		created, err := api.Create(ctx, sc, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			return "", nil
		case err != nil:
			return "", fmt.Errorf("create default ServiceCIDR: %w", err)
		}
		return created.ResourceVersion, nil
	case err != nil:
		return "", fmt.Errorf("get default ServiceCIDR: %w", err)
	}
	if sc.DeletionTimestamp != nil {
		s.warnDefaultServiceCIDROnce(ctx, sc, ReasonDefaultServiceCIDRTerminating,
			"The default ServiceCIDR is being deleted: it serves no new allocations, and is re-created from --service-cluster-ip-range "+
				"once the IPAddresses it still holds are released. Create another ServiceCIDR with %v to keep allocating meanwhile", want)
		return sc.ResourceVersion, nil
	}
	if slices.Equal(sc.Spec.CIDRs, want) {
		return sc.ResourceVersion, nil
	}
	if len(sc.Spec.CIDRs) == 1 && len(want) == 2 && sc.Spec.CIDRs[0] == want[0] {
		sc.Spec.CIDRs = want
		grown, err := api.Update(ctx, sc, metav1.UpdateOptions{})
		if err != nil {
			return "", fmt.Errorf("grow default ServiceCIDR to dual-stack: %w", err)
		}
		return grown.ResourceVersion, nil
	}
	s.warnDefaultServiceCIDROnce(ctx, sc, ReasonKubernetesDefaultServiceCIDRInconsistent, "%s",
		rangeMismatch(sc.Spec.CIDRs, want, s.backend == nil || s.backend.AllocatesFromServiceCIDRs()))
	return sc.ResourceVersion, nil
}

// rangeMismatch is the warning of a --service-cluster-ip-range (flag) that
// differs from the stored default ServiceCIDR other than by gaining a
// family: which one is in effect, and how to change it. fromServiceCIDRs
// says the server allocates from the ServiceCIDRs (the IPAddress model);
// the bitmap model allocates from the flag's range.
func rangeMismatch(stored, flag []string, fromServiceCIDRs bool) string {
	storedText, flagText := strings.Join(stored, ","), strings.Join(flag, ",")
	effect := fmt.Sprintf("the stored ServiceCIDR is in effect: this server allocates from the ServiceCIDRs, so new ClusterIPs come from %s and "+
		"%s is served only where another ServiceCIDR holds it", storedText, flagText)
	if !fromServiceCIDRs {
		effect = fmt.Sprintf("this server (--allocator=bitmap) allocates from the flag's %s, while IPAddress-model servers and "+
			"kube-apiservers on this etcd allocate from the stored %s", flagText, storedText)
	}
	return fmt.Sprintf("--service-cluster-ip-range is %s but the stored default ServiceCIDR %q has %s, and a ServiceCIDR can only grow "+
		"from single- to dual-stack, so it is left as it is: %s. "+
		"To keep the stored range, set --service-cluster-ip-range=%s on every replica; "+
		"to move to the flag's range, follow \"Replacing the default range\" in docs/operations.md "+
		"(add a ServiceCIDR with %s, drain and renumber %q, then delete it: it is re-created from the flag)",
		flagText, DefaultServiceCIDRName, storedText, effect, storedText, flagText, DefaultServiceCIDRName)
}

// Reasons of the Warning events on the default ServiceCIDR.
const (
	ReasonDefaultServiceCIDRTerminating            = "DefaultServiceCIDRTerminating"
	ReasonKubernetesDefaultServiceCIDRInconsistent = "KubernetesDefaultServiceCIDRInconsistent" // upstream's reason
)

// warnDefaultServiceCIDROnce emits a Warning event on sc and logs it as a
// warning line, once per reason and object UID (the check runs every
// 10 s): at start-up, and when the default ServiceCIDR changes.
func (s *Server) warnDefaultServiceCIDROnce(ctx context.Context, sc *networkingv1.ServiceCIDR, reason, format string, args ...any) {
	key := reason + "/" + string(sc.UID)
	s.warnedMu.Lock()
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	seen := s.warned[key]
	s.warned[key] = true
	s.warnedMu.Unlock()
	if seen {
		return
	}
	msg := fmt.Sprintf(format, args...)
	warningLine(reason + ": " + msg)
	if s.recorder != nil {
		s.recorder.Event(sc, corev1.EventTypeWarning, reason, msg)
	}
}

// ensureKubernetesService creates default/kubernetes with the first address
// of the primary range, as kube-apiserver does.
//
// With fixPort an existing Service's target port is set to this server's
// port (bootstrap only: replicas on different ports would otherwise take
// turns rewriting it).
func (s *Server) ensureKubernetesService(ctx context.Context, client kubernetes.Interface, fixPort bool) error {
	ip := s.cfg.ServiceCIDRs[0].Addr().Next().String()
	policy := corev1.IPFamilyPolicySingleStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"},
		},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			ClusterIP:       ip,
			ClusterIPs:      []string{ip},
			IPFamilyPolicy:  &policy,
			SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []corev1.ServicePort{{
				Name: "https", Port: 443, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(int32(s.cfg.KubernetesServicePort)),
			}},
		},
	}
	// Read first, as kube-apiserver does: a create of an existing Service
	// asks again for the address it holds and is refused as taken (422),
	// not as existing (409).
	services := client.CoreV1().Services(metav1.NamespaceDefault)
	existing, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = services.Create(ctx, svc, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create default/kubernetes Service: %w", err)
		}
		// Created meanwhile (another replica), or its address went to
		// another Service while it was gone.
		created := err
		existing, err = services.Get(ctx, svc.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Do not hold readiness hostage to it; log and try again later.
			logger(ctx).Info("Cannot create the default/kubernetes Service", "err", created)
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("get default/kubernetes Service: %w", err)
	}
	if !fixPort {
		return nil
	}
	// It exists: keep its port pointing at this server's port (it changes
	// across restarts with --secure-port 0).
	for i, p := range existing.Spec.Ports {
		if p.Name == "https" && p.TargetPort != svc.Spec.Ports[0].TargetPort {
			existing.Spec.Ports[i].TargetPort = svc.Spec.Ports[0].TargetPort
			if _, err := services.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update default/kubernetes Service port: %w", err)
			}
		}
	}
	return nil
}

// keepDefaultServiceCIDR re-creates the default ServiceCIDR and the
// kubernetes Service if they are deleted, as kube-apiserver's controllers do.
func (s *Server) keepDefaultServiceCIDR(ctx context.Context, client kubernetes.Interface) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := s.ensureDefaultServiceCIDR(ctx, client); err != nil && ctx.Err() == nil {
			logger(ctx).Info("Default ServiceCIDR check failed", "err", err)
		}
		if err := s.ensureKubernetesService(ctx, client, false); err != nil && ctx.Err() == nil {
			logger(ctx).Info("kubernetes Service check failed", "err", err)
		}
	}, defaultServiceCIDRInterval)
}

// warningLine logs msg at klog's warning severity: a "W" line in the text
// format, which an operator's log filter keeps where it drops info lines.
// The structured logger has no warning level (logr: info and error).
func warningLine(msg string) {
	klog.WarningDepth(1, "allocator: "+msg)
}
