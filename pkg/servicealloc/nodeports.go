package servicealloc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
)

// Node ports follow upstream kube-apiserver's Service registry
// (pkg/registry/core/service/storage/alloc.go), so a Service behaves the same
// whichever server a client talks to:
//
//   - Type NodePort, and LoadBalancer unless allocateLoadBalancerNodePorts is
//     false, gets a nodePort on every port. A requested nodePort is reserved
//     as is (422 "provided port is already allocated" / "provided port is not
//     in the valid range. The range of valid ports is …" on
//     spec.ports[i].nodePort); a missing one is picked, except that ports of
//     the same number share one nodePort (53/TCP and 53/UDP → 30053), on
//     create only, as upstream.
//   - A LoadBalancer with externalTrafficPolicy Local gets healthCheckNodePort.
//   - On update, ports the Service already held are kept without a new
//     reservation; new ones are reserved; ones the update drops (a changed
//     nodePort, a removed port, type → ClusterIP/ExternalName, traffic policy
//     → Cluster) are released only when the update is stored (Commit), like
//     cluster IPs, so a failed update never frees a port its Service keeps.
//   - Dry-run asks the allocator's dry-run view: it reports conflicts and
//     reserves nothing.

// needsNodePorts reports whether svc's type carries node ports.
func needsNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// shouldAllocateNodePorts reports whether ports without a nodePort get one.
func shouldAllocateNodePorts(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeLoadBalancer:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

// defaultNodePortFields applies upstream's v1 defaults that decide node-port
// allocation: allocateLoadBalancerNodePorts true for LoadBalancer, and
// externalTrafficPolicy Cluster for NodePort and LoadBalancer.
func defaultNodePortFields(svc *corev1.Service) {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.AllocateLoadBalancerNodePorts == nil {
		yes := true
		svc.Spec.AllocateLoadBalancerNodePorts = &yes
	}
	if needsNodePorts(svc) && svc.Spec.ExternalTrafficPolicy == "" {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
}

// validateNodePortFields refuses nodePorts on a ClusterIP Service and two
// ports of one protocol on one nodePort (53/TCP and 53/UDP may share one).
// Other types are not checked here, as upstream does not: an update away
// from NodePort drops unchanged nodePorts (dropTypeDependentFields).
func validateNodePortFields(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if svc.Spec.Type == corev1.ServiceTypeClusterIP {
		for i, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				errs = append(errs, field.Forbidden(portsPath.Index(i).Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			}
		}
	}
	type protoPort struct {
		protocol corev1.Protocol
		nodePort int32
	}
	seen := map[protoPort]bool{}
	for i, p := range svc.Spec.Ports {
		if p.NodePort == 0 {
			continue
		}
		k := protoPort{p.Protocol, p.NodePort}
		if seen[k] {
			errs = append(errs, field.Duplicate(portsPath.Index(i).Child("nodePort"), p.NodePort))
		}
		seen[k] = true
	}
	return errs
}

// portTxn is the node-port part of a Transaction.
type portTxn struct {
	reserved  []int // released by Revert
	toRelease []int // released by Commit
	// dryHeld is what a dry run would have reserved: the dry-run view
	// reserves nothing, so a port asked for twice in one request is
	// refused here as the real request refuses it.
	dryHeld map[int]bool
}

// nodePorts returns the allocator to use for a request: the dry-run view for
// a dry run.
func (a *Allocator) nodePortAllocator(dryRun bool) nodeport.Interface {
	if dryRun {
		return a.nodePorts.DryRun()
	}
	return a.nodePorts
}

// reservePort reserves port for the request and records it in txn.
func (a *Allocator) reservePort(ctx context.Context, txn *Transaction, alloc nodeport.Interface, port int, dryRun bool) error {
	if dryRun && txn.ports.dryHeld[port] {
		return nodeport.ErrAllocated
	}
	if err := a.admitReservation(); err != nil {
		return err
	}
	if err := alloc.Allocate(ctx, port); err != nil {
		return err
	}
	if !dryRun {
		txn.ports.reserved = append(txn.ports.reserved, port)
		return nil
	}
	if txn.ports.dryHeld == nil {
		txn.ports.dryHeld = map[int]bool{}
	}
	txn.ports.dryHeld[port] = true
	return nil
}

// reserveNextPort picks and reserves a free port.
func (a *Allocator) reserveNextPort(ctx context.Context, txn *Transaction, alloc nodeport.Interface, dryRun bool) (int, error) {
	if err := a.admitReservation(); err != nil {
		return 0, err
	}
	port, err := alloc.AllocateNext(ctx)
	if err != nil {
		return 0, err
	}
	if !dryRun {
		txn.ports.reserved = append(txn.ports.reserved, port)
		return port, nil
	}
	if txn.ports.dryHeld[port] {
		if port, err = nextDryPort(ctx, txn.ports.dryHeld, alloc, port); err != nil {
			return 0, err
		}
	}
	if txn.ports.dryHeld == nil {
		txn.ports.dryHeld = map[int]bool{}
	}
	txn.ports.dryHeld[port] = true
	return port, nil
}

// nextDryPort is the first port after picked, wrapping around the range,
// that is free and not in held (what the dry run reserved already): the
// dry-run view reserves nothing, so its picks for one request (the ports'
// nodePorts, the healthCheckNodePort) could repeat, which the real
// request's never do.
func nextDryPort(ctx context.Context, held map[int]bool, alloc nodeport.Interface, picked int) (int, error) {
	rng := alloc.Range()
	for i := 1; i < rng.Size(); i++ {
		port := rng.Base() + (picked-rng.Base()+i)%rng.Size()
		if held[port] {
			continue
		}
		err := alloc.Allocate(ctx, port)
		switch {
		case err == nil:
			return port, nil
		case !errors.Is(err, nodeport.ErrAllocated):
			return 0, err
		}
	}
	return 0, allocation.ErrFull
}

// nodePortError maps an error of reserving a requested nodePort to the API
// error upstream returns.
func (a *Allocator) nodePortError(svc *corev1.Service, path *field.Path, port int32, err error) error {
	switch {
	case errors.Is(err, allocation.ErrNotReady):
		return a.notReady(err)
	case errors.Is(err, nodeport.ErrAllocated), errors.Is(err, nodeport.ErrNotInRange):
		return apierrors.NewInvalid(serviceKind, svc.Name, field.ErrorList{field.Invalid(path, port, err.Error())})
	default:
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate nodePort %d: %w", port, err))
	}
}

// nextNodePortError maps an error of picking a free node port to
// upstream's 500 "failed to allocate a nodePort: ...". The allocator's hint
// for a full range (allocation.Hint) goes to the client as a warning, as
// for ClusterIPs.
func (a *Allocator) nextNodePortError(ctx context.Context, err error) error {
	if errors.Is(err, allocation.ErrNotReady) {
		return a.notReady(err)
	}
	if hint := allocation.Hint(err); hint != "" {
		warning.AddWarning(ctx, "", hint)
	}
	return apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %w", err))
}

// allocateNodePortsCreate reserves the node ports of a Service being created.
func (a *Allocator) allocateNodePortsCreate(ctx context.Context, txn *Transaction, svc *corev1.Service, dryRun bool) error {
	if a.nodePorts == nil {
		return nil
	}
	alloc := a.nodePortAllocator(dryRun)
	if needsNodePorts(svc) {
		byPort := map[int32]int32{} // service port → the nodePort it got
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
			if p.NodePort == 0 && !shouldAllocateNodePorts(svc) {
				continue // nothing to allocate, but requested ones are kept
			}
			shared := byPort[p.Port]
			switch {
			case shared == 0:
				requested := requestedNodePort(p.Port, svc.Spec.Ports)
				if requested != 0 {
					if err := a.reservePort(ctx, txn, alloc, int(requested), dryRun); err != nil {
						return a.nodePortError(svc, path, requested, err)
					}
					p.NodePort = requested
				} else {
					port, err := a.reserveNextPort(ctx, txn, alloc, dryRun)
					if err != nil {
						return a.nextNodePortError(ctx, err)
					}
					p.NodePort = int32(port)
				}
				byPort[p.Port] = p.NodePort
			case p.NodePort == 0:
				p.NodePort = shared
			case p.NodePort != shared:
				if err := a.reservePort(ctx, txn, alloc, int(p.NodePort), dryRun); err != nil {
					return a.nodePortError(svc, path, p.NodePort, err)
				}
			}
		}
	}
	if holding.NeedsHealthCheckNodePort(svc) {
		if err := a.allocateHealthCheckNodePort(ctx, txn, alloc, svc, dryRun); err != nil {
			return err
		}
	}
	return nil
}

// requestedNodePort is the nodePort a port of that number asks for, if any
// (so 53/UDP with 30053 and 53/TCP with none share 30053).
func requestedNodePort(port int32, ports []corev1.ServicePort) int32 {
	for _, p := range ports {
		if p.Port == port && p.NodePort != 0 {
			return p.NodePort
		}
	}
	return 0
}

// allocateHealthCheckNodePort reserves the requested healthCheckNodePort or
// picks one. Errors are 500 with upstream's texts.
func (a *Allocator) allocateHealthCheckNodePort(ctx context.Context, txn *Transaction, alloc nodeport.Interface, svc *corev1.Service, dryRun bool) error {
	if port := svc.Spec.HealthCheckNodePort; port != 0 {
		if err := a.reservePort(ctx, txn, alloc, int(port), dryRun); err != nil {
			if errors.Is(err, allocation.ErrNotReady) {
				return a.notReady(err)
			}
			return apierrors.NewInternalError(fmt.Errorf("failed to allocate requested HealthCheck NodePort %d: %w", port, err))
		}
		return nil
	}
	port, err := a.reserveNextPort(ctx, txn, alloc, dryRun)
	if err != nil {
		if errors.Is(err, allocation.ErrNotReady) {
			return a.notReady(err)
		}
		if hint := allocation.Hint(err); hint != "" {
			warning.AddWarning(ctx, "", hint)
		}
		return apierrors.NewInternalError(fmt.Errorf("failed to allocate a HealthCheck NodePort: %w", err))
	}
	svc.Spec.HealthCheckNodePort = int32(port)
	return nil
}

// allocateNodePortsUpdate reserves what an update from old to svc adds and
// records what it drops, to be released on Commit.
func (a *Allocator) allocateNodePortsUpdate(ctx context.Context, txn *Transaction, svc, old *corev1.Service, dryRun bool) error {
	if a.nodePorts == nil {
		return nil
	}
	alloc := a.nodePortAllocator(dryRun)
	// Only old's nodePorts count as held by a port: its healthCheckNodePort
	// is not, so a port asking for it is reserved anew and refused as
	// taken. One node port must never serve two roles, or releasing one
	// role frees a port the other still uses.
	oldPorts := nodePortsOnly(old)
	var drop []int
	if needsNodePorts(old) && !needsNodePorts(svc) {
		drop = append(drop, nodePortsOnly(old)...)
	}
	if needsNodePorts(svc) {
		reserved := map[int32]bool{}
		// A (protocol, nodePort) given twice is upstream's plain error: a
		// 500 "duplicate nodePort: {TCP 30047}" (the create path refuses
		// the second reservation instead).
		type protoPort struct {
			Protocol corev1.Protocol
			NodePort int32
		}
		seen := map[protoPort]bool{}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			path := field.NewPath("spec", "ports").Index(i).Child("nodePort")
			if p.NodePort == 0 && !shouldAllocateNodePorts(svc) {
				continue
			}
			if p.NodePort != 0 {
				if !slices.Contains(oldPorts, int(p.NodePort)) && !reserved[p.NodePort] {
					if err := a.reservePort(ctx, txn, alloc, int(p.NodePort), dryRun); err != nil {
						return a.nodePortError(svc, path, p.NodePort, err)
					}
					reserved[p.NodePort] = true
				}
			} else {
				port, err := a.reserveNextPort(ctx, txn, alloc, dryRun)
				if err != nil {
					return a.nextNodePortError(ctx, err)
				}
				p.NodePort = int32(port)
			}
			k := protoPort{p.Protocol, p.NodePort}
			if seen[k] {
				return fmt.Errorf("duplicate nodePort: %v", k)
			}
			seen[k] = true
		}
		newPorts := nodePortsOnly(svc)
		for _, port := range nodePortsOnly(old) {
			if !slices.Contains(newPorts, port) && port != int(svc.Spec.HealthCheckNodePort) {
				drop = append(drop, port)
			}
		}
	}
	switch {
	case !holding.NeedsHealthCheckNodePort(old) && holding.NeedsHealthCheckNodePort(svc):
		if err := a.allocateHealthCheckNodePort(ctx, txn, alloc, svc, dryRun); err != nil {
			return err
		}
	case holding.NeedsHealthCheckNodePort(old) && !holding.NeedsHealthCheckNodePort(svc):
		drop = append(drop, int(old.Spec.HealthCheckNodePort))
	}
	if !dryRun {
		// A changed healthCheckNodePort was refused by validation, so a
		// port svc still holds is one it held before: it stays allocated.
		keep := holding.NodePorts(svc)
		for _, port := range drop {
			if port != 0 && !slices.Contains(keep, port) && !slices.Contains(txn.ports.toRelease, port) {
				txn.ports.toRelease = append(txn.ports.toRelease, port)
			}
		}
	}
	return nil
}

// nodePortsOnly is the distinct non-zero nodePorts of svc's ports.
func nodePortsOnly(svc *corev1.Service) []int {
	var out []int
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !slices.Contains(out, int(p.NodePort)) {
			out = append(out, int(p.NodePort))
		}
	}
	return out
}

// releasePorts frees ports on a context detached from ctx (see release).
func (a *Allocator) releasePorts(ctx context.Context, owner allocation.Owner, ports []int) {
	if len(ports) == 0 || a.nodePorts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for _, port := range ports {
		if err := retryRelease(ctx, func(ctx context.Context) error { return a.nodePorts.Release(ctx, port) }); err != nil {
			klog.FromContext(ctx).Error(err, "Releasing a node port failed; repair will free it", "nodePort", port, "service", owner)
		}
	}
}
