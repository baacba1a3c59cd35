// Package scope reads and checks the scope of a ServiceCIDR: which Services
// its addresses are for (design.md §11). A scope is written as annotations,
// so a scoped ServiceCIDR stays a plain networking.k8s.io/v1 object that
// kube-apiserver stores and serves unchanged:
//
//	scope.allocator.github.io/namespace-selector  label selector on the Service's namespace (required; "" is every namespace)
//	scope.allocator.github.io/service-selector    label selector on the Service (optional; absent is every Service)
//	scope.allocator.github.io/priority            integer; higher is tried first (optional; default 0)
//	scope.allocator.github.io/fallback            "true": its Services may take unscoped ServiceCIDRs' addresses when the scoped ones are full (optional; default "false")
//
// Selectors use the label selector syntax of kubectl's --selector:
// "team=a", "team in (a,b),tier!=test", "kubernetes.io/metadata.name=shop".
// A ServiceCIDR without the namespace-selector annotation is unscoped.
package scope

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Prefix is the annotation prefix of every scope key.
const Prefix = "scope.allocator.github.io/"

// The scope annotations.
const (
	NamespaceSelectorAnnotation = Prefix + "namespace-selector"
	ServiceSelectorAnnotation   = Prefix + "service-selector"
	PriorityAnnotation          = Prefix + "priority"
	FallbackAnnotation          = Prefix + "fallback"
)

// MaxPriority bounds the priority annotation (and its negative).
const MaxPriority = 1000

// The bounds of a selector annotation that a create or update writes
// (ValidateBounds). Every dynamic or user-chosen allocation for a Service
// evaluates the selectors of every scoped ServiceCIDR of its family, so
// a selector's cost is part of every Service create's: a 129 kB selector
// made each create take 256 ms. The bounds leave room for a list of some
// hundred namespaces by name ("kubernetes.io/metadata.name in (a,b,...)")
// and for any selector written by hand.
const (
	// MaxSelectorBytes bounds the length of a selector.
	MaxSelectorBytes = 4096
	// MaxSelectorRequirements bounds the number of a selector's
	// requirements: its comma-separated terms ("team=a", "tier in (x,y)").
	MaxSelectorRequirements = 32
)

var known = []string{FallbackAnnotation, NamespaceSelectorAnnotation, PriorityAnnotation, ServiceSelectorAnnotation}

// Scope is the parsed scope of one ServiceCIDR.
type Scope struct {
	// Namespaces selects the namespaces whose Services may use the ServiceCIDR.
	Namespaces labels.Selector
	// Services narrows that to the Services it selects (labels.Everything when absent).
	Services labels.Selector
	// Priority orders the scoped ServiceCIDRs a Service matches: higher first.
	Priority int
	// Fallback lets the Services it matches take addresses of unscoped
	// ServiceCIDRs once every scoped ServiceCIDR they match is full.
	Fallback bool
}

// Matches reports whether a Service with svcLabels in a namespace with
// nsLabels is in the scope.
func (s *Scope) Matches(nsLabels, svcLabels labels.Set) bool {
	return s.Namespaces.Matches(nsLabels) && s.Services.Matches(svcLabels)
}

// String is the scope as `allocator status` shows it.
func (s *Scope) String() string {
	parts := []string{"namespaces " + selectorText(s.Namespaces)}
	if !s.Services.Empty() {
		parts = append(parts, "services "+selectorText(s.Services))
	}
	if s.Priority != 0 {
		parts = append(parts, "priority "+strconv.Itoa(s.Priority))
	}
	if s.Fallback {
		parts = append(parts, "fallback")
	}
	return strings.Join(parts, "; ")
}

func selectorText(s labels.Selector) string {
	if s.Empty() {
		return "(all)"
	}
	return s.String()
}

// annotationsPath is the path Parse's errors name.
var annotationsPath = field.NewPath("metadata", "annotations")

// Parse returns the scope the annotations describe, nil for an unscoped
// ServiceCIDR, or an error naming the first bad annotation. A ServiceCIDR
// stored by a writer that does not validate scopes (kube-apiserver) can
// carry a bad one; the allocator then serves none of its addresses.
func Parse(annotations map[string]string) (*Scope, error) {
	if len(annotations) == 0 {
		return nil, nil // most ServiceCIDRs; the allocator's first build of its ranges parses each
	}
	if errs := Validate(annotations, annotationsPath); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	text, ok := annotations[NamespaceSelectorAnnotation]
	if !ok {
		return nil, nil
	}
	s := &Scope{Services: labels.Everything()}
	s.Namespaces, _ = labels.Parse(text) // validated above
	if text, ok := annotations[ServiceSelectorAnnotation]; ok {
		s.Services, _ = labels.Parse(text)
	}
	if text, ok := annotations[PriorityAnnotation]; ok {
		s.Priority, _ = strconv.Atoi(text)
	}
	s.Fallback = annotations[FallbackAnnotation] == "true"
	return s, nil
}

// SameScope reports whether two annotation sets carry the same scope
// annotations (an update that changes none of them changes no scope).
func SameScope(a, b map[string]string) bool {
	for _, k := range known {
		va, oka := a[k]
		vb, okb := b[k]
		if va != vb || oka != okb {
			return false
		}
	}
	return true
}

// Scoped reports whether the annotations scope the ServiceCIDR.
func Scoped(annotations map[string]string) bool {
	_, ok := annotations[NamespaceSelectorAnnotation]
	return ok
}

// Validate checks the scope annotations of a ServiceCIDR; path is its
// metadata.annotations. Of the other annotations it refuses only those
// whose prefix is a near miss of Prefix (misspelled): such a ServiceCIDR was
// meant to be scoped, and served unscoped its addresses would go to every
// Service.
func Validate(annotations map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, Prefix) {
			keys = append(keys, k)
		} else if err := MisspelledPrefix(k, Prefix, "scope", path); err != nil {
			errs = append(errs, err)
		}
	}
	sort.Strings(keys)
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	_, scoped := annotations[NamespaceSelectorAnnotation]
	var unanchored []string
	for _, k := range keys {
		v := annotations[k]
		p := path.Key(k)
		switch k {
		case NamespaceSelectorAnnotation, ServiceSelectorAnnotation:
			if _, err := labels.Parse(v); err != nil {
				errs = append(errs, field.Invalid(p, v, fmt.Sprintf("must be a label selector (e.g. \"team=a\" or \"team in (a,b)\"): %v", err)))
			}
		case PriorityAnnotation:
			n, err := strconv.Atoi(v)
			if err != nil || n < -MaxPriority || n > MaxPriority {
				errs = append(errs, field.Invalid(p, v, fmt.Sprintf("must be an integer from %d to %d", -MaxPriority, MaxPriority)))
			}
		case FallbackAnnotation:
			if v != "true" && v != "false" {
				errs = append(errs, field.Invalid(p, v, `must be "true" or "false"`))
			}
		default:
			errs = append(errs, field.NotSupported(p, k, known))
			continue
		}
		if k != NamespaceSelectorAnnotation && !scoped {
			unanchored = append(unanchored, k)
		}
	}
	if len(unanchored) > 0 {
		errs = append(errs, field.Required(path.Key(NamespaceSelectorAnnotation),
			fmt.Sprintf("a ServiceCIDR with %s is scoped and must say which namespaces it serves (\"\" for all)", strings.Join(unanchored, ", "))))
	}
	return errs
}

// ValidateBounds refuses a selector annotation longer than
// MaxSelectorBytes or with more than MaxSelectorRequirements requirements;
// path is metadata.annotations. The API server runs it on the selectors a
// create or update writes; a selector stored before (or by kube-apiserver)
// is served as it is.
func ValidateBounds(annotations map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range []string{NamespaceSelectorAnnotation, ServiceSelectorAnnotation} {
		v, ok := annotations[k]
		if !ok {
			continue
		}
		p := path.Key(k)
		if len(v) > MaxSelectorBytes {
			errs = append(errs, &field.Error{Type: field.ErrorTypeTooLong, Field: p.String(), BadValue: "",
				Detail: fmt.Sprintf("a scope selector may be at most %d bytes, this one is %d: select the namespaces or Services by a label they share "+
					"(every Service create evaluates every scope's selectors)", MaxSelectorBytes, len(v))})
			continue
		}
		sel, err := labels.Parse(v)
		if err != nil {
			continue // Validate reports it
		}
		if reqs, _ := sel.Requirements(); len(reqs) > MaxSelectorRequirements {
			errs = append(errs, &field.Error{Type: field.ErrorTypeTooMany, Field: p.String(), BadValue: len(reqs),
				Detail: fmt.Sprintf("a scope selector may have at most %d requirements (comma-separated terms): select the namespaces or Services by a label they share, "+
					"or list values in one term (\"team in (a,b,c)\")", MaxSelectorRequirements)})
		}
	}
	return errs
}

// maxPrefixTypos is how many single-character edits away from a prefix's
// domain an annotation's prefix is taken for a misspelling of it.
const maxPrefixTypos = 3

// MisspelledPrefix refuses annotation key k when its prefix is within
// maxPrefixTypos edits of prefix (an annotation prefix ending in "/") but
// is not prefix; what names the family in the message ("scope"). The
// annotation families of a ServiceCIDR (this package's, pkg/ipaddress/lifecycle's)
// change what it serves, so a misspelled one must not be stored silently
// as an annotation nobody reads.
func MisspelledPrefix(k, prefix, what string, path *field.Path) *field.Error {
	domain, name, ok := strings.Cut(k, "/")
	want := strings.TrimSuffix(prefix, "/")
	if !ok || domain == want || editDistance(domain, want) > maxPrefixTypos {
		return nil
	}
	return field.Invalid(path.Key(k), k, fmt.Sprintf("annotation prefix %q is not the %s prefix %q: did you mean %s?", domain+"/", what, prefix, prefix+name))
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Verdict is how the scoped ServiceCIDRs of one IP family treat one Service.
// It holds the one rule both the allocator and the repair apply: a Service
// in no scope uses only unscoped ServiceCIDRs; a Service in some scope uses
// those scopes' ServiceCIDRs, and the unscoped ones too only when every
// scope it is in falls back (the most restrictive scope wins).
type Verdict struct {
	// In: the Service is in at least one scope.
	In bool
	// Fallback: In, and every scope it is in falls back.
	Fallback bool
}

// Note records whether the Service is in one scoped ServiceCIDR's scope s.
func (v *Verdict) Note(s *Scope, in bool) {
	if !in {
		return
	}
	v.Fallback = (v.Fallback || !v.In) && s.Fallback
	v.In = true
}

// Unscoped reports whether the Service may use unscoped ServiceCIDRs.
func (v Verdict) Unscoped() bool { return !v.In || v.Fallback }
