package nodeport

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"

	"github.com/allocator/allocator/pkg/bitmap"
)

// ErrAllocated means a static allocation asked for a port that is taken.
var ErrAllocated = errors.New("provided port is already allocated")

// ErrNotInRange matches every *NotInRangeError with errors.Is.
var ErrNotInRange = errors.New("provided port is not in the valid range")

// NotInRangeError is a requested port outside the node-port range.
type NotInRangeError struct {
	Port       int
	ValidPorts string
}

func (e *NotInRangeError) Error() string {
	return fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", e.ValidPorts)
}

// Is makes errors.Is(err, ErrNotInRange) true.
func (e *NotInRangeError) Is(target error) bool { return target == ErrNotInRange }

// Interface is what the Service registry and repair need of a node-port
// allocator. Every call that does I/O takes a context.
type Interface interface {
	// Allocate reserves port: ErrAllocated when taken, *NotInRangeError
	// when outside the range.
	Allocate(ctx context.Context, port int) error
	// AllocateNext reserves a free port, upper band first;
	// allocation.ErrFull when none is left.
	AllocateNext(ctx context.Context) (int, error)
	// Release frees port; a no-op when it is not allocated or out of range.
	Release(ctx context.Context, port int) error
	// Has reports whether port is allocated.
	Has(ctx context.Context, port int) (bool, error)
	// Range is the node-port range served.
	Range() Range
	// DryRun returns a view that checks and answers but changes nothing.
	DryRun() Interface
}

// EtcdAllocator is the node-port map on etcd.
type EtcdAllocator struct {
	*bitmap.Store
	rng Range
}

var _ Interface = (*EtcdAllocator)(nil)

// NewEtcd returns an allocator of r whose map lives at key. It does no I/O;
// Open creates the map.
func NewEtcd(client *clientv3.Client, key string, r Range, opts bitmap.EtcdOptions) (*EtcdAllocator, error) {
	if r.IsZero() {
		return nil, errors.New("node-port allocator: empty port range")
	}
	store, err := bitmap.NewStore(client, key, r, opts)
	if err != nil {
		return nil, fmt.Errorf("node-port allocator: %w", err)
	}
	return &EtcdAllocator{Store: store, rng: r}, nil
}

// Open creates the empty map if the key is absent (create-if-absent, as
// kube-apiserver does at start-up) and reports whether it did. A stored map
// of another range is re-ranged: every allocated port inside r is kept, the
// others are dropped and reported, in one CAS write (see rerange.go).
func (a *EtcdAllocator) Open(ctx context.Context) (created bool, dropped []int, err error) {
	created, err = a.Create(ctx)
	if err == nil || !errors.Is(err, bitmap.ErrStoredRangeMismatch) {
		return created, nil, err
	}
	dropped, err = a.rerange(ctx)
	return false, dropped, err
}

// Range is the node-port range served.
func (a *EtcdAllocator) Range() Range { return a.rng }

func (a *EtcdAllocator) slot(port int) (int, error) {
	i, ok := a.rng.Index(port)
	if !ok {
		return 0, &NotInRangeError{Port: port, ValidPorts: a.rng.String()}
	}
	return i, nil
}

// Allocate reserves port.
func (a *EtcdAllocator) Allocate(ctx context.Context, port int) error {
	i, err := a.slot(port)
	if err != nil {
		return err
	}
	if err := a.AllocateSlot(ctx, i); err != nil {
		if errors.Is(err, allocation.ErrAllocated) {
			return ErrAllocated
		}
		return fmt.Errorf("allocate node port %d: %w", port, err)
	}
	return nil
}

// AllocateNext reserves a free port, upper band first.
func (a *EtcdAllocator) AllocateNext(ctx context.Context) (int, error) {
	i, err := a.AllocateNextSlot(ctx)
	if err != nil {
		if errors.Is(err, allocation.ErrFull) {
			return 0, fullError(a.rng)
		}
		return 0, fmt.Errorf("allocate next node port: %w", err)
	}
	port, _ := a.rng.Port(i)
	return port, nil
}

// Release frees port; a no-op when not allocated or out of range.
func (a *EtcdAllocator) Release(ctx context.Context, port int) error {
	i, ok := a.rng.Index(port)
	if !ok {
		return nil
	}
	if err := a.ReleaseSlot(ctx, i); err != nil {
		return fmt.Errorf("release node port %d: %w", port, err)
	}
	return nil
}

// Has reports whether port is allocated, confirmed against etcd.
func (a *EtcdAllocator) Has(ctx context.Context, port int) (bool, error) {
	i, ok := a.rng.Index(port)
	if !ok {
		return false, nil
	}
	var has bool
	if err := a.Read(ctx, func(b *bitset.Set) { has = b.Has(i) }); err != nil {
		return false, fmt.Errorf("has node port %d: %w", port, err)
	}
	return has, nil
}

// ForEach calls fn for every allocated port in ascending order, from a state
// confirmed against etcd.
func (a *EtcdAllocator) ForEach(ctx context.Context, fn func(port int)) error {
	var snapshot *bitset.Set
	if err := a.Read(ctx, func(b *bitset.Set) { snapshot = b.Clone() }); err != nil {
		return fmt.Errorf("list node ports: %w", err)
	}
	snapshot.ForEach(func(i int) { fn(a.rng.Base() + i) })
	return nil
}

// DryRun returns a view that answers from confirmed state and never writes.
func (a *EtcdAllocator) DryRun() Interface { return dryRun{a} }

type dryRun struct{ a *EtcdAllocator }

func (d dryRun) Allocate(ctx context.Context, port int) error {
	i, err := d.a.slot(port)
	if err != nil {
		return err
	}
	var taken bool
	if err := d.a.Read(ctx, func(b *bitset.Set) { taken = b.Has(i) }); err != nil {
		return fmt.Errorf("dry-run allocate node port %d: %w", port, err)
	}
	if taken {
		return ErrAllocated
	}
	return nil
}

func (d dryRun) AllocateNext(ctx context.Context) (int, error) {
	slot, found := 0, false
	if err := d.a.Read(ctx, func(b *bitset.Set) { slot, found = b.NextDynamic() }); err != nil {
		return 0, fmt.Errorf("dry-run allocate next node port: %w", err)
	}
	if !found {
		return 0, fullError(d.a.rng)
	}
	return d.a.rng.Base() + slot, nil
}

// fullError is ErrFull (kube-apiserver's "range is full") with the
// operator's hint: what makes room in r.
func fullError(r Range) error {
	return allocation.NewFullError(fmt.Sprintf("the node-port range %s (--service-node-port-range) has no free port: "+
		"delete NodePort and LoadBalancer Services no longer needed, set allocateLoadBalancerNodePorts: false on "+
		"LoadBalancers that need no node ports, or widen --service-node-port-range on every API server", r))
}

func (d dryRun) Release(context.Context, int) error              { return nil }
func (d dryRun) Has(ctx context.Context, port int) (bool, error) { return d.a.Has(ctx, port) }
func (d dryRun) Range() Range                                    { return d.a.rng }
func (d dryRun) DryRun() Interface                               { return d }
