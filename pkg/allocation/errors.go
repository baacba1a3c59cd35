// Package allocation holds what both ClusterIP allocator models share: the
// errors users see (with upstream kube-apiserver's texts, design.md §4) and
// the small contract the Service registry and the repair code program against.
//
// It imports only the standard library so that every model can depend on it.
package allocation

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Sentinel errors. Their texts are upstream's; clients and tests match them.
var (
	// ErrFull means a dynamic allocation found no free address.
	ErrFull = errors.New("range is full")
	// ErrAllocated means a static allocation asked for an address that is taken.
	ErrAllocated = errors.New("provided IP is already allocated")
	// ErrMismatchedNetwork means a snapshot of another range was restored, or (in the
	// IPAddress model) a static IP lies in no ServiceCIDR.
	ErrMismatchedNetwork = errors.New("the provided network does not match the current range")
	// ErrNotReady means the allocator's view is not loaded yet (caches not synced).
	ErrNotReady = errors.New("allocator not ready")
	// ErrAllocationDisabled means the bitmap model's RangeAllocation key is missing,
	// so there is nothing to allocate from until it is initialised.
	ErrAllocationDisabled = errors.New("cannot allocate resources of type serviceipallocations at this time")
	// ErrOutcomeUnknown marks a claim that failed without anyone learning
	// whether it was stored (an IPAddress create whose answer was lost and
	// whose fence could not be closed): it may still land. What was reserved
	// for it stays reserved; the repair frees it once the outcome is known.
	ErrOutcomeUnknown = errors.New("the claim's outcome is unknown")
)

// NotInRangeError is returned when an address lies outside the allocator's
// usable range. It is a type, not a sentinel, so callers can read which
// address and range were involved; errors.Is(err, ErrNotInRange) also matches.
type NotInRangeError struct {
	IP         netip.Addr
	ValidRange string
}

func (e *NotInRangeError) Error() string {
	return fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", e.IP, e.ValidRange)
}

// Is makes errors.Is(err, ErrNotInRange) true for every *NotInRangeError.
func (e *NotInRangeError) Is(target error) bool { return target == ErrNotInRange }

// ErrNotInRange matches any *NotInRangeError with errors.Is.
var ErrNotInRange = errors.New("is not in the valid range")

// OutOfScopeError is returned by a scoped static allocation (Owner.Scoped)
// when the address lies in served ServiceCIDRs, none of which the Service's
// scope lets it use (design.md §11). The API answers 422 with its text.
type OutOfScopeError struct {
	IP netip.Addr
	// Allowed names the ServiceCIDRs of the address's family the Service may
	// use, sorted.
	Allowed []string
}

func (e *OutOfScopeError) Error() string {
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("%s is in a ServiceCIDR scoped to other Services, and no ServiceCIDR of its family serves this Service", e.IP)
	}
	return fmt.Sprintf("%s is in a ServiceCIDR scoped to other Services; this Service may use ServiceCIDR %s", e.IP, QuoteNames(e.Allowed))
}

// DrainingError is returned by a new static allocation (Owner.Scoped) when
// every ServiceCIDR holding the address is draining (pkg/ipaddress/lifecycle): it
// takes no new allocation while the Services it holds keep theirs. The API
// answers 422 with its text.
type DrainingError struct {
	IP netip.Addr
	// ServiceCIDRs name the draining ServiceCIDRs that hold IP, sorted.
	ServiceCIDRs []string
}

func (e *DrainingError) Error() string {
	verb := "is"
	if len(e.ServiceCIDRs) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("%s is in ServiceCIDR %s, which %s draining and takes no new allocation; "+
		"choose an address of another ServiceCIDR, or leave spec.clusterIP empty", e.IP, QuoteNames(e.ServiceCIDRs), verb)
}

// ScopeFullError is returned by a scoped dynamic allocation when every
// ServiceCIDR of the Service's scope is full and the scope does not fall
// back to unscoped ones. errors.Is(err, ErrFull) matches it.
type ScopeFullError struct {
	// ServiceCIDRs are the full scoped ServiceCIDRs, sorted.
	ServiceCIDRs []string
}

func (e *ScopeFullError) Error() string {
	return fmt.Sprintf("%v: ServiceCIDR %s of this Service's scope (no fallback to unscoped ServiceCIDRs)", ErrFull, QuoteNames(e.ServiceCIDRs))
}

// Is makes errors.Is(err, ErrFull) true.
func (e *ScopeFullError) Is(target error) bool { return target == ErrFull }

// Hint says what makes room for the scope's Services.
func (e *ScopeFullError) Hint() string {
	return fmt.Sprintf("ServiceCIDR %s of this Service's scope have no free address: add a ServiceCIDR with the same scope annotations, "+
		"or let the scope take unscoped addresses (annotation %sfallback: \"true\"); `kubectl allocator status` shows how full each range is",
		QuoteNames(e.ServiceCIDRs), scopePrefix)
}

// scopePrefix is pkg/ipaddress/scope's annotation prefix, spelled again here because
// this package imports only the standard library (pkg/ipaddress/scope's tests check
// the two agree).
const scopePrefix = "scope.allocator.github.io/"

// FullError is ErrFull with a hint for the operator: which ranges are full
// and what makes room. Its message is ErrFull's alone, kube-apiserver's text;
// the API server sends the hint as a warning beside it.
type FullError struct {
	hint string
}

// NewFullError returns ErrFull with hint.
func NewFullError(hint string) *FullError { return &FullError{hint: hint} }

func (e *FullError) Error() string { return ErrFull.Error() }

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Hint says which ranges are full and what makes room.
func (e *FullError) Hint() string { return e.hint }

// Hint returns the operator's hint an allocation error carries (FullError,
// ScopeFullError), or "".
func Hint(err error) string {
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// QuoteNames lists names quoted, comma-separated, as the messages that
// name ServiceCIDRs spell them ("a", "b").
func QuoteNames(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return strings.Join(quoted, ", ")
}
