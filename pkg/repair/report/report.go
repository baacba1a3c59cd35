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

// Unresolved counts the problems the pass did not fix.
func (r *Report) Unresolved() int {
	n := 0
	for _, p := range r.Problems {
		if !p.Fixed {
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
	return fmt.Sprintf("%s repair: %d services, %d allocated, %d problems (%d unresolved), %d writes, %v",
		r.Subject(), r.Services, r.Allocated, len(r.Problems), r.Unresolved(), r.Writes, r.Duration.Round(time.Millisecond))
}
