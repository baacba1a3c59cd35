package rangeusage

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// NoNamespace is the namespace of an address held by no Service (a bit with
// no Service, an IPAddress without a parentRef).
const NoNamespace = "<none>"

// Band is the fill of one band (or of a whole CIDR).
type Band struct {
	Size uint64 `json:"size"`
	Used uint64 `json:"used"`
}

// Free is the number of usable addresses not allocated.
func (b Band) Free() uint64 { return b.Size - b.Used }

// Percent is Used as a percentage of Size (0 for an empty band).
func (b Band) Percent() float64 { return percent(float64(b.Used), float64(b.Size)) }

// NearlyFullPercent is the fill from which a range is nearly full.
const NearlyFullPercent = 90

// NearlyFull reports whether a range of this fill has no free slot left, or
// is at least NearlyFullPercent allocated: a request that asks for no
// particular address or port fails with "range is full" once Free is 0.
func (b Band) NearlyFull() bool {
	return b.Size > 0 && (b.Free() == 0 || b.Percent() >= NearlyFullPercent)
}

func percent(used, size float64) float64 {
	if size == 0 {
		return 0
	}
	return used / size * 100
}

// NamespaceCount is how many addresses of a CIDR one namespace holds.
type NamespaceCount struct {
	Namespace string `json:"namespace"`
	Used      uint64 `json:"used"`
}

// CIDR is the fill of one service CIDR.
type CIDR struct {
	Family string
	Prefix netip.Prefix
	// Source names the object the CIDR comes from: "ServiceCIDR/<name>" or
	// "RangeAllocation/<key>".
	Source string
	// Ready is false for a ServiceCIDR being deleted: it serves no new
	// allocation.
	Ready bool
	// Scope is the ServiceCIDR's scope as text (design.md §11), "" when
	// unscoped.
	Scope string
	// Lifecycle is the ServiceCIDR's lifecycle as text (pkg/ipaddress/lifecycle:
	// "draining", "manual-only"), "" when it takes every allocation.
	Lifecycle string
	// Services counts the addresses a Service holds (an IPAddress whose
	// parentRef is a Service, a bit with its Service): one per Service, as a CIDR is of
	// one family. Draining ends when it is 0.
	Services uint64
	// First and Last are the usable window; invalid when it is empty.
	First, Last netip.Addr
	Static      Band
	Dynamic     Band
	// Namespaces are the holders of its addresses, most addresses first.
	Namespaces []NamespaceCount
}

// Total is the fill of the whole CIDR.
func (c CIDR) Total() Band {
	return Band{Size: c.Static.Size + c.Dynamic.Size, Used: c.Static.Used + c.Dynamic.Used}
}

// Family is the fill of one IP family over all its CIDRs.
type Family struct {
	Family string
	// Size is the number of usable addresses of the outermost CIDRs.
	Size *big.Int
	// Used is the number of distinct addresses inside some CIDR.
	Used uint64
	// Outside is the number of allocated addresses inside no CIDR.
	Outside uint64
}

// Free is Size − Used.
func (f Family) Free() *big.Int { return new(big.Int).Sub(f.Size, new(big.Int).SetUint64(f.Used)) }

// Percent is Used as a percentage of Size.
func (f Family) Percent() float64 {
	size, _ := new(big.Float).SetInt(f.Size).Float64()
	return percent(float64(f.Used), size)
}

// NearlyFull is Band.NearlyFull for the family's outermost CIDRs together.
func (f Family) NearlyFull() bool {
	return f.Size.Sign() > 0 && (f.Free().Sign() == 0 || f.Percent() >= NearlyFullPercent)
}

// Usage is the fill of a cluster's service ranges under one model.
type Usage struct {
	// Model is the allocator model measured.
	Model    model.Name
	Families []Family
	// CIDRs are ordered by family (IPv4 first), then prefix.
	CIDRs []CIDR
	// ScopesIgnoredBy names the live writers that allocate without scopes
	// (transition.WritersIgnoringScopes), when some CIDR is scoped and the
	// caller could look.
	ScopesIgnoredBy []string
	// CountedFrom is "Services" when the used counts are the addresses the
	// Services hold rather than the model's own record (FromServices: the
	// bitmap model without etcd, where a leaked bit is not seen); "" when
	// they are the model's record.
	CountedFrom string
}

// HasLifecycle reports whether some CIDR is draining or manual-only.
func (u *Usage) HasLifecycle() bool {
	for _, c := range u.CIDRs {
		if c.Lifecycle != "" {
			return true
		}
	}
	return false
}

// Scoped reports whether some CIDR is scoped.
func (u *Usage) Scoped() bool {
	for _, c := range u.CIDRs {
		if c.Scope != "" {
			return true
		}
	}
	return false
}

// Range is one CIDR to measure.
type Range struct {
	Prefix    netip.Prefix
	Source    string
	Ready     bool
	Scope     string
	Lifecycle string
}

// Address is one allocated address and the namespace holding it
// (NoNamespace, or "", when none does).
type Address struct {
	IP        netip.Addr
	Namespace string
}

// Compute measures ranges under model's usable-address rules against the
// allocated addresses. It visits each address once per range; it never
// iterates a range.
func Compute(m model.Name, ranges []Range, addrs []Address) (*Usage, error) {
	type measured struct {
		rng subrange.Range
		out CIDR
		ns  map[string]uint64
	}
	cidrs := make([]*measured, 0, len(ranges))
	for _, r := range ranges {
		rng, err := subrange.New(r.Prefix, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Source, err)
		}
		m := &measured{rng: rng, ns: map[string]uint64{}, out: CIDR{
			Family: subrange.FamilyName(r.Prefix.Addr().Is6()), Prefix: r.Prefix, Source: r.Source, Ready: r.Ready, Scope: r.Scope, Lifecycle: r.Lifecycle,
			Static:  Band{Size: rng.StaticSize()},
			Dynamic: Band{Size: rng.Size() - rng.StaticSize()},
		}}
		if rng.Size() > 0 {
			m.out.First, m.out.Last = rng.First(), rng.Last()
		}
		cidrs = append(cidrs, m)
	}
	slices.SortStableFunc(cidrs, func(a, b *measured) int { return compareCIDRs(&a.out, &b.out) })

	families := map[string]*Family{}
	family := func(name string) *Family {
		if f, ok := families[name]; ok {
			return f
		}
		f := &Family{Family: name, Size: new(big.Int)}
		families[name] = f
		return f
	}
	for _, m := range cidrs {
		f := family(m.out.Family)
		outermost := !slices.ContainsFunc(cidrs, func(o *measured) bool {
			return o != m && o.out.Prefix.Bits() < m.out.Prefix.Bits() && o.out.Prefix.Contains(m.out.Prefix.Addr()) ||
				// Two ServiceCIDRs with the same prefix: size it once.
				o.out.Prefix == m.out.Prefix && slices.Index(cidrs, o) < slices.Index(cidrs, m)
		})
		if outermost {
			f.Size.Add(f.Size, new(big.Int).SetUint64(m.rng.Size()))
		}
	}
	for _, a := range addrs {
		ns := a.Namespace
		if ns == "" {
			ns = NoNamespace
		}
		f := family(subrange.FamilyName(a.IP.Is6()))
		inside := false
		for _, m := range cidrs {
			if !m.rng.Contains(a.IP) {
				continue
			}
			inside = true
			if m.rng.InStaticBand(a.IP) {
				m.out.Static.Used++
			} else {
				m.out.Dynamic.Used++
			}
			m.ns[ns]++
			if ns != NoNamespace {
				m.out.Services++
			}
		}
		if inside {
			f.Used++
		} else {
			f.Outside++
		}
	}

	usage := &Usage{Model: m}
	for _, m := range cidrs {
		for ns, n := range m.ns {
			m.out.Namespaces = append(m.out.Namespaces, NamespaceCount{Namespace: ns, Used: n})
		}
		sortNamespaces(m.out.Namespaces)
		usage.CIDRs = append(usage.CIDRs, m.out)
	}
	for _, name := range []string{subrange.IPv4, subrange.IPv6} {
		if f, ok := families[name]; ok {
			usage.Families = append(usage.Families, *f)
		}
	}
	return usage, nil
}

// sortNamespaces orders counts by most addresses (or ports) first, then by
// name.
func sortNamespaces(counts []NamespaceCount) {
	slices.SortFunc(counts, func(a, b NamespaceCount) int {
		if c := cmp.Compare(b.Used, a.Used); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
}

// compareCIDRs orders CIDRs by family (IPv4 first), then prefix.
func compareCIDRs(a, b *CIDR) int {
	if c := cmp.Compare(a.Family, b.Family); c != 0 {
		return c
	}
	if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits())
}

// Round2 rounds a percentage to two decimals, for output.
func Round2(p float64) float64 { return math.Round(p*100) / 100 }
