package ipaddress

import (
	"fmt"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// BenchmarkRoute is the cost scopes add to picking a candidate: the route
// of one request (one selector match per scoped ServiceCIDR its namespace
// can be in, scopeindex.go) and the pick, with 0 or 100 scoped /24s
// beside the default /16, for a Service in one scope and for one in none.
//
//	go test -run '^$' -bench BenchmarkRoute -benchmem ./pkg/ipaddress/
func BenchmarkRoute(b *testing.B) {
	for _, scoped := range []int{0, 100} {
		cidrs := []*networkingv1.ServiceCIDR{serviceCIDR("kubernetes", 10*time.Hour, "10.0.0.0/16")}
		for i := range scoped {
			sc := serviceCIDR(fmt.Sprintf("team-%d", i), time.Hour, fmt.Sprintf("10.1.%d.0/24", i))
			sc.Annotations = map[string]string{scope.NamespaceSelectorAnnotation: fmt.Sprintf("team=t%d", i)}
			cidrs = append(cidrs, sc)
		}
		active, _ := selectRanges(cidrs, false)
		a := &Allocator{}
		for _, ar := range active {
			idx, err := NewFreeIndex(ar.rng)
			if err != nil {
				b.Fatal(err)
			}
			a.ranges = append(a.ranges, &cidrRange{activeRange: ar, index: idx})
		}
		a.splitScopesLocked()
		for _, who := range []struct {
			name string
			ns   labels.Set
		}{{"in-scope", labels.Set{"team": "t50"}}, {"in-none", labels.Set{"team": "nobody"}}} {
			b.Run(fmt.Sprintf("scoped=%d/%s", scoped, who.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, ok, _ := a.pickForLocked(true, who.ns, nil, nil); !ok {
						b.Fatal("no candidate")
					}
				}
			})
		}
	}
}

// BenchmarkRouteAtScale is one routed dynamic pick among 10,000 IPv4
// /28s, the first 9,000 of them full, and one scoped /24: with the /28s
// unscoped, for a Service in no scope (what every create pays once one
// scoped ServiceCIDR exists beside many unscoped ones); with each /28
// scoped to its own team, for a Service of the last team.
//
//	go test -run '^$' -bench BenchmarkRouteAtScale -benchmem ./pkg/ipaddress/
func BenchmarkRouteAtScale(b *testing.B) {
	for _, scoped := range []bool{false, true} {
		b.Run(fmt.Sprintf("scoped=%v", scoped), func(b *testing.B) {
			a := rangesAtScale(b, scoped)
			ns := labels.Set{"team": "none"}
			if scoped {
				ns = labels.Set{"team": "t9999"}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := a.pickForLocked(true, ns, nil, nil); !ok {
					b.Fatal("no candidate")
				}
			}
		})
	}
}

// rangesAtScale is BenchmarkRouteAtScale's allocator.
func rangesAtScale(b *testing.B, scoped bool) *Allocator {
	cidrs := []*networkingv1.ServiceCIDR{}
	for i := range 10_000 {
		sc := serviceCIDR(fmt.Sprintf("r-%05d", i), time.Hour, fmt.Sprintf("10.%d.%d.%d/28", i>>12, (i>>4)&255, (i&15)<<4))
		if scoped {
			sc.Annotations = map[string]string{scope.NamespaceSelectorAnnotation: fmt.Sprintf("team=t%d", i)}
		}
		cidrs = append(cidrs, sc)
	}
	team := serviceCIDR("team", time.Minute, "10.200.0.0/24")
	team.Annotations = map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}
	cidrs = append(cidrs, team)
	active, _ := selectRanges(cidrs, false)
	var ranges []*cidrRange
	for i, ar := range active {
		idx, err := NewFreeIndex(ar.rng)
		if err != nil {
			b.Fatal(err)
		}
		if i < 9_000 {
			for ip, ok := idx.Next(); ok; ip, ok = idx.Next() {
				idx.Set(ip)
			}
		}
		ranges = append(ranges, &cidrRange{activeRange: ar, index: idx})
	}
	a := &Allocator{}
	a.setRangesLocked(ranges)
	return a
}
