package report

import (
	"fmt"
	"time"

	"github.com/allocator/allocator/pkg/model"
)

// Problem types, also the values of the type label of
// apiserver_clusterip_repair_ip_errors_total (design.md §9).
const (
	TypeLeak       = "leak"       // allocated, no Service holds it
	TypeRepair     = "repair"     // a Service holds it, not allocated
	TypeFull       = "full"       // the range cannot hold what Services use
	TypeOutOfRange = "outOfRange" // a Service's IP is outside every range
	TypeOutOfScope = "outOfScope" // a Service's IP is outside the ServiceCIDRs its scope allows (design.md §11)
	TypeDuplicate  = "duplicate"  // two Services hold one IP
	TypeInvalid    = "invalid"    // a Service's IP does not parse, or its family is not served
	TypeUnknown    = "unknown"
)

// Event reasons, as upstream kube-apiserver's repair controllers emit them.
const (
	ReasonNotValid         = "ClusterIPNotValid"
	ReasonOutOfRange       = "ClusterIPOutOfRange"
	ReasonOutOfScope       = "ClusterIPOutOfScope" // ours: upstream has no scopes
	ReasonNotAllocated     = "ClusterIPNotAllocated"
	ReasonAlreadyAllocated = "ClusterIPAlreadyAllocated"
	ReasonCIDRFull         = "ServiceCIDRFull"
	ReasonUnknown          = "UnknownError"
	ReasonIPNotAllocated   = "IPAddressNotAllocated"
	ReasonWrongReference   = "IPAddressWrongReference"
)

// Problem is one finding of a repair pass.
type Problem struct {
	// Type is one of the Type* constants.
	Type string `json:"type"`
	// Reason is the event reason, empty for findings that emit no event.
	Reason string `json:"reason,omitempty"`
	// IP is the address concerned, as the Service or the map spells it;
	// for a node-port problem, the port.
	IP string `json:"ip"`
	// Resource is "nodePort" for a node-port problem, empty for a ClusterIP.
	Resource string `json:"resource,omitempty"`
	// Service is "namespace/name" of the Service concerned, if any.
	Service string `json:"service,omitempty"`
	// Message is the human-readable text (the event message when there is one).
	Message string `json:"message"`
	// Fixed is true when the pass changed the stored state to resolve it.
	Fixed bool `json:"fixed"`
	// InFlight is true on a leak kept only because a Service write that was
	// in flight when its grace ended may still claim it
	// (repair.Options.InFlight); it is freed once that write can no longer
	// land.
	InFlight bool `json:"inFlight,omitempty"`
	// Foreign is true when the object concerned is managed by another
	// controller (an IPAddress without the label managed-by=ipallocator.k8s.io),
	// which no repair writes. The repairs leave it false; the standalone
	// job sets it once it has read the object.
	Foreign bool `json:"foreign,omitempty"`
	// Clear is the label or command that clears a finding left by design
	// (Standing ByDesign), for an operator; empty otherwise.
	Clear string `json:"clear,omitempty"`
}

// Standing is what a finding leaves for an operator, and whether it fails
// the job that reports it.
type Standing int

const (
	// Resolved: the pass changed the stored state to resolve it.
	Resolved Standing = iota
	// ByDesign: a state the repairs leave on purpose and that no pass or
	// wait will change, because only a person may decide it: a Service
	// outside its scope keeps its address until it is recreated, and an
	// IPAddress another controller manages is never written. It does not
	// fail the job; Problem.Clear says what clears it.
	ByDesign
	// Unresolved: anything else the pass left (a duplicate, an address out
	// of range, a leak not freed yet, ...). It fails the job.
	Unresolved
)

func (s Standing) String() string {
	switch s {
	case Resolved:
		return "resolved"
	case ByDesign:
		return "by design"
	}
	return "unresolved"
}

// byDesignTypes are the problem types that are by design whoever's object
// is concerned; foreignByDesignTypes are by design when the object is
// another controller's (Problem.Foreign): one referencing a Service that
// does not hold its address (leak), or holding the address for its Service
// with other labels (repair). A foreign object that holds a Service's
// address for another parent is a duplicate, and fails the job.
var (
	byDesignTypes        = map[string]bool{TypeOutOfScope: true}
	foreignByDesignTypes = map[string]bool{TypeLeak: true, TypeRepair: true}
)

// Standing classifies the finding: Resolved when the pass fixed it, ByDesign
// for the types above, Unresolved otherwise.
func (p Problem) Standing() Standing {
	switch {
	case p.Fixed:
		return Resolved
	case byDesignTypes[p.Type], p.Foreign && foreignByDesignTypes[p.Type]:
		return ByDesign
	}
	return Unresolved
}

// Report is the outcome of one repair pass.
type Report struct {
	// Model is the ClusterIP allocator model repaired; empty when the map
	// repaired holds no ClusterIPs (Resource says what it holds).
	Model model.Name `json:"model"`
	// Resource is what the map repaired holds when it is not ClusterIPs
	// ("nodePort", as Problem.Resource); empty for a ClusterIP repair.
	Resource string `json:"resource,omitempty"`
	// DryRun is true when the pass only reported.
	DryRun bool `json:"dryRun"`
	// Services is the number of Services examined.
	Services int `json:"services"`
	// Allocated is the number of addresses allocated after the pass.
	Allocated int `json:"allocated"`
	// Writes is the number of stored objects the pass changed.
	Writes int `json:"writes"`
	// Problems are the findings, in a stable order.
	Problems []Problem `json:"problems"`
	// Duration is how long the pass took.
	Duration time.Duration `json:"duration"`
}

// Unresolved counts the problems the pass did not fix, other than those
// left by design: the ones that fail the job.
func (r *Report) Unresolved() int { return r.count(Unresolved) }

// LeftByDesign counts the problems left by design (Standing ByDesign).
func (r *Report) LeftByDesign() int { return r.count(ByDesign) }

func (r *Report) count(s Standing) int {
	n := 0
	for _, p := range r.Problems {
		if p.Standing() == s {
			n++
		}
	}
	return n
}

// Find returns the first problem of type typ about ip (for a node port,
// the port's number).
func (r *Report) Find(typ, ip string) (Problem, bool) {
	for _, p := range r.Problems {
		if p.Type == typ && p.IP == ip {
			return p, true
		}
	}
	return Problem{}, false
}

// Consistent reports whether the pass found nothing at all.
func (r *Report) Consistent() bool { return len(r.Problems) == 0 }

// Subject names what the pass repaired: the model, or the Resource.
func (r *Report) Subject() string {
	if r.Resource != "" {
		return r.Resource
	}
	return r.Model.String()
}

func (r *Report) String() string {
	return fmt.Sprintf("%s repair: %d services, %d allocated, %d problems (%d unresolved, %d by design), %d writes, %v",
		r.Subject(), r.Services, r.Allocated, len(r.Problems), r.Unresolved(), r.LeftByDesign(), r.Writes, r.Duration.Round(time.Millisecond))
}
