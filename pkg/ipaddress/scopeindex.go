package ipaddress

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// scopeIndex finds the scoped carriers whose namespace selector a
// namespace's labels can match, so that a routed request matches those,
// not every scoped ServiceCIDR: a carrier whose selector requires a label
// to equal one of some values (team=a, team in (a,b)) is filed under each
// of those key=value pairs, and only a namespace carrying one of them can
// match it; a carrier whose selector requires no such value (team!=a,
// team, everything) is filed apart and always asked. Scoped ServiceCIDRs
// are mostly one per team or tenant, selecting by an equality, so a
// request asks the few of its own namespace's labels. It is kept with the
// scoped ranges, a range at a time (served.go).
type scopeIndex struct {
	byLabel map[labelPair][]scopedCarrier
	always  []scopedCarrier
}

type labelPair struct{ key, value string }

// scopedCarrier is a scoped carrier of a served range.
type scopedCarrier struct {
	r *cidrRange
	c carrier
}

// filing returns the key=value pairs a carrier's selector is filed under:
// those of its first requirement of a label's value; none when it has no
// such requirement.
func filing(sel labels.Selector) []labelPair {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return nil
	}
	for _, req := range reqs {
		switch req.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			var out []labelPair
			for _, v := range req.ValuesUnsorted() {
				out = append(out, labelPair{req.Key(), v})
			}
			return out
		}
	}
	return nil
}

// add files r's scoped carriers.
func (x *scopeIndex) add(r *cidrRange) {
	for _, c := range r.carriers {
		if c.scope == nil {
			continue
		}
		pairs := filing(c.scope.Namespaces)
		if len(pairs) == 0 {
			x.always = append(x.always, scopedCarrier{r, c})
			continue
		}
		if x.byLabel == nil {
			x.byLabel = map[labelPair][]scopedCarrier{}
		}
		for _, p := range pairs {
			x.byLabel[p] = append(x.byLabel[p], scopedCarrier{r, c})
		}
	}
}

// remove takes out what add filed for r, with r's carriers unchanged
// since.
func (x *scopeIndex) remove(r *cidrRange) {
	ours := func(s scopedCarrier) bool { return s.r == r }
	for _, c := range r.carriers {
		if c.scope == nil {
			continue
		}
		pairs := filing(c.scope.Namespaces)
		if len(pairs) == 0 {
			x.always = slices.DeleteFunc(x.always, ours)
			continue
		}
		for _, p := range pairs {
			if left := slices.DeleteFunc(x.byLabel[p], ours); len(left) > 0 {
				x.byLabel[p] = left
			} else {
				delete(x.byLabel, p)
			}
		}
	}
}

// each calls fn with every scoped carrier a namespace with nsLabels can
// be in, each once: those filed under one of its labels, then those
// always asked.
func (x *scopeIndex) each(nsLabels labels.Set, fn func(*cidrRange, carrier)) {
	for k, v := range nsLabels {
		for _, s := range x.byLabel[labelPair{k, v}] {
			fn(s.r, s.c)
		}
	}
	for _, s := range x.always {
		fn(s.r, s.c)
	}
}
