package parity

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/pkg/model"
)

// Op is what a step asks of the server.
type Op string

// The operations a step can send.
const (
	OpCreate       Op = "create"
	OpUpdate       Op = "update"        // GET (not recorded), Mutate, PUT
	OpUpdateStatus Op = "update-status" // GET (not recorded), Mutate, PUT .../status
	OpPatch        Op = "patch"
	OpPatchStatus  Op = "patch-status"
	OpDelete       Op = "delete"
	OpGet          Op = "get"
	// OpWaitReady polls a ServiceCIDR until its Ready condition is True
	// (the controller that sets it runs after the create's answer), then
	// records the condition.
	OpWaitReady Op = "wait-ready"
)

// Kind is the resource a step addresses.
type Kind string

// The resources of the corpus.
const (
	KindService     Kind = "services"
	KindServiceCIDR Kind = "servicecidrs"
)

// Step is one request.
type Step struct {
	Op   Op
	Kind Kind
	Name string
	// Service or CIDR is the body of a create.
	Service *corev1.Service
	CIDR    *networkingv1.ServiceCIDR
	// Mutate or MutateCIDR changes the current object for an update.
	Mutate     func(*corev1.Service)
	MutateCIDR func(*networkingv1.ServiceCIDR)
	// Patch is the body of a patch, of type PatchType.
	Patch     string
	PatchType types.PatchType
	DryRun    bool
	// Deliberate marks a step we answer differently from kube-apiserver on
	// purpose; design.md §7 says why.
	Deliberate *Deliberate
}

// Deliberate is our answer to a step where we differ from upstream on
// purpose: its code and reason are compared instead of upstream's answer.
type Deliberate struct {
	Why    string `json:"why"`
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
}

// Case is a named sequence of steps run from a clean server.
type Case struct {
	Name string
	// Models limits the case to these allocator models (nil: all). Upstream
	// has only the IPAddress model; a case that needs what the bitmap model
	// deliberately lacks is marked here and design.md §7 says why.
	Models []model.Name
	Steps  []Step
}

// Request is the one-line description of a step the record keeps.
func (s Step) Request() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s", s.Op, s.Kind, s.Name)
	if s.DryRun {
		b.WriteString(" dryRun=All")
	}
	switch s.Op {
	case OpCreate:
		b.WriteString(" ")
		b.WriteString(mustCompactJSON(s.body()))
	case OpPatch, OpPatchStatus:
		fmt.Fprintf(&b, " %s %s", s.PatchType, s.Patch)
	}
	return b.String()
}

func (s Step) body() any {
	if s.Kind == KindServiceCIDR {
		return s.CIDR
	}
	return s.Service
}

// runsIn tells whether the case runs against m.
func (c Case) runsIn(m model.Name) bool {
	return len(c.Models) == 0 || slices.Contains(c.Models, m)
}
