// Package lifecycle reads and checks the lifecycle of a ServiceCIDR: which
// new allocations it takes (design.md §11). It is written as annotations,
// so the ServiceCIDR stays a plain networking.k8s.io/v1 object that
// kube-apiserver stores and serves unchanged:
//
//	lifecycle.allocator.github.io/draining     "true": no new allocation, dynamic or user-chosen (optional; default "false")
//	lifecycle.allocator.github.io/manual-only  "true": only user-chosen ClusterIPs, never a dynamic pick (optional; default "false")
//
// The modes, from open to closed:
//
//	mode       dynamic pick  user-chosen ClusterIP  addresses Services hold
//	automatic  yes           yes                    kept
//	manual     no            yes                    kept
//	draining   no            no                     kept
//
// Draining wins over manual-only when both are "true", so a manual-only
// range can be drained and then reopened as manual-only by removing one
// annotation. A lifecycle never moves or refuses an address a Service
// already holds: it governs new allocations only.
//
// A value other than "true" or "false" is refused by the API (Validate); one
// stored by a writer that does not validate (kube-apiserver) reads as
// draining (Parse), the closed mode that still keeps every Service's
// address: read as open, a range meant to drain would keep handing out
// addresses.
package lifecycle

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// Prefix is the annotation prefix of every lifecycle key.
const Prefix = "lifecycle.allocator.github.io/"

// The lifecycle annotations.
const (
	DrainingAnnotation   = Prefix + "draining"
	ManualOnlyAnnotation = Prefix + "manual-only"
)

var known = []string{DrainingAnnotation, ManualOnlyAnnotation}

// Mode is which new allocations a ServiceCIDR takes. The zero value is
// Automatic.
type Mode int

// The modes, from open to closed.
const (
	// Automatic takes dynamic picks and user-chosen ClusterIPs.
	Automatic Mode = iota
	// Manual takes user-chosen ClusterIPs only.
	Manual
	// Draining takes no new allocation.
	Draining
)

// String is the mode as `allocator status` shows it: "" for Automatic.
func (m Mode) String() string {
	switch m {
	case Manual:
		return "manual-only"
	case Draining:
		return "draining"
	default:
		return ""
	}
}

// Dynamic reports whether the mode takes dynamic picks.
func (m Mode) Dynamic() bool { return m == Automatic }

// Static reports whether the mode takes user-chosen ClusterIPs.
func (m Mode) Static() bool { return m != Draining }

// Parse returns the mode the annotations describe. A value that Validate
// refuses reads as Draining and is returned with the error, so the caller
// can both apply the safe mode and report why.
func Parse(annotations map[string]string) (Mode, error) {
	var errs []string
	flag := func(key string) bool {
		v, ok := annotations[key]
		switch {
		case !ok || v == "false":
			return false
		case v == "true":
			return true
		default:
			errs = append(errs, fmt.Sprintf("%s: %q is not \"true\" or \"false\"", key, v))
			return true
		}
	}
	draining, manual := flag(DrainingAnnotation), flag(ManualOnlyAnnotation)
	var err error
	if len(errs) > 0 {
		err = fmt.Errorf("invalid lifecycle annotation, read as draining: %s", strings.Join(errs, "; "))
		return Draining, err
	}
	switch {
	case draining:
		return Draining, nil
	case manual:
		return Manual, nil
	default:
		return Automatic, nil
	}
}

// Validate checks the lifecycle annotations of a ServiceCIDR; path is its
// metadata.annotations. It refuses a value other than "true" or "false", an
// unknown key under Prefix, and a key whose prefix is a misspelling of
// Prefix (scope.MisspelledPrefix): a ServiceCIDR meant to drain must not be
// stored open because of a typo.
func Validate(annotations map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, Prefix) {
			keys = append(keys, k)
		} else if err := scope.MisspelledPrefix(k, Prefix, "lifecycle", path); err != nil {
			errs = append(errs, err)
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	sort.Strings(keys)
	for _, k := range keys {
		v, p := annotations[k], path.Key(k)
		switch k {
		case DrainingAnnotation, ManualOnlyAnnotation:
			if v != "true" && v != "false" {
				errs = append(errs, field.Invalid(p, v, `must be "true" or "false"`))
			}
		default:
			errs = append(errs, field.NotSupported(p, k, known))
		}
	}
	return errs
}

// Annotated reports whether the annotations carry a lifecycle key, whatever
// its value.
func Annotated(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, Prefix) {
			return true
		}
	}
	return false
}

// Same reports whether two annotation sets carry the same lifecycle
// annotations.
func Same(a, b map[string]string) bool {
	for k, v := range a {
		if strings.HasPrefix(k, Prefix) {
			if w, ok := b[k]; !ok || w != v {
				return false
			}
		}
	}
	for k := range b {
		if _, ok := a[k]; strings.HasPrefix(k, Prefix) && !ok {
			return false
		}
	}
	return true
}
