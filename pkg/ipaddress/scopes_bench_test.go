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
// of one request (one selector match per scoped ServiceCIDR) and the pick,
// with 0 or 100 scoped /24s beside the default /16, for a Service in one
// scope and for one in none.
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
					ranges, rt := a.candidatesLocked(true, who.ns, nil, useDynamic)
					if _, ok := a.pickLocked(ranges, rt == nil, nil); !ok {
						b.Fatal("no candidate")
					}
				}
			})
		}
	}
}
