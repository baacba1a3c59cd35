package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// etcdLiveNames is the ServiceCIDR controller's live read in the server
// (servicecidr.LiveNames): before a deleted ServiceCIDR goes, the names of
// the IPAddresses under its prefixes, read from etcd's keys (keys only, a
// linearizable read) instead of a list of every IPAddress of the family.
// An IPAddress's key ends in its name, the canonical text of its address,
// so the IPv4 addresses of a prefix of /8 or longer are the keys under at
// most 128 text prefixes ("10.96.5." for 10.96.5.0/24), and the IPv6
// addresses of a /64 or longer under at most 16 (textPrefixes6). Other
// prefixes (wider ones, IPv4-mapped IPv6) are read by listing.
type etcdLiveNames struct {
	etcd   *clientv3.Client
	layout etcdlayout.Layout
	list   servicecidr.LiveNames
}

// maxOpsPerTxn stays under etcd's default --max-txn-ops (128).
const maxOpsPerTxn = 64

func (l etcdLiveNames) Names(ctx context.Context, prefixes []netip.Prefix) ([]string, error) {
	var ops []clientv3.Op
	var of []netip.Prefix // the prefix each op reads for
	var listed []netip.Prefix
	for _, p := range prefixes {
		texts, ok := textPrefixes(p)
		if !ok {
			listed = append(listed, p)
			continue
		}
		for _, t := range texts {
			if t.exact {
				ops = append(ops, clientv3.OpGet(l.layout.IPAddress(t.text), clientv3.WithKeysOnly()))
			} else {
				ops = append(ops, clientv3.OpGet(l.layout.IPAddress(t.text), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
			}
			of = append(of, p)
		}
	}
	var names []string
	root := l.layout.IPAddressesPrefix()
	for len(ops) > 0 {
		chunk := ops[:min(len(ops), maxOpsPerTxn)]
		ops = ops[len(chunk):]
		resp, err := l.etcd.Txn(ctx).Then(chunk...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read IPAddress keys: %w", err)
		}
		for i, r := range resp.Responses {
			p := of[i]
			for _, kv := range r.GetResponseRange().GetKvs() {
				name := strings.TrimPrefix(string(kv.Key), root)
				// An IPv6 text also starts other addresses' names
				// ("fd00::5:" those of fd00::5:0:0/96 too).
				if a, err := netip.ParseAddr(name); err == nil && p.Addr().Is6() && !p.Contains(a) {
					continue
				}
				names = append(names, name)
			}
		}
		of = of[len(chunk):]
	}
	if len(listed) > 0 {
		more, err := l.list.Names(ctx, listed)
		if err != nil {
			return nil, err
		}
		names = append(names, more...)
	}
	return names, nil
}

// textPrefix is a text every canonical IPv4 address of a prefix starts
// with (exact: is).
type textPrefix struct {
	text  string
	exact bool
}

// textPrefixes returns texts that the canonical name of every address of
// p starts with (or is, when exact); false when there are too many of them
// to read (an IPv4 prefix wider than /8, an IPv6 one wider than /64) or
// when p holds IPv4-mapped IPv6 addresses. For IPv4 no other address's name
// matches them; for IPv6 other addresses' names may (the caller checks).
func textPrefixes(p netip.Prefix) ([]textPrefix, bool) {
	if !p.IsValid() {
		return nil, false
	}
	if p.Addr().Is6() {
		return textPrefixes6(p)
	}
	if p.Bits() < 8 {
		return nil, false
	}
	p = p.Masked()
	a := p.Addr().As4()
	whole, rest := p.Bits()/8, p.Bits()%8
	if whole == 4 {
		return []textPrefix{{text: p.Addr().String(), exact: true}}, true
	}
	var head strings.Builder
	for _, octet := range a[:whole] {
		head.WriteString(strconv.Itoa(int(octet)))
		head.WriteByte('.')
	}
	if rest == 0 {
		return []textPrefix{{text: head.String()}}, true
	}
	// The next octet takes 2^(8-rest) values; each ends at a dot (so "10."
	// is not a prefix of "100.") or, as the last octet, is the whole name.
	n := 1 << (8 - rest)
	out := make([]textPrefix, 0, n)
	for v := int(a[whole]); v < int(a[whole])+n; v++ {
		text := head.String() + strconv.Itoa(v)
		if whole == 3 {
			out = append(out, textPrefix{text: text, exact: true})
		} else {
			out = append(out, textPrefix{text: text + "."})
		}
	}
	return out, true
}

// v4Mapped holds the IPv4-mapped IPv6 addresses, whose canonical text ends
// in dotted IPv4 ("::ffff:10.0.0.1"): textPrefixes6 leaves them to a list.
var v4Mapped = netip.MustParsePrefix("::ffff:0:0/96")

// textPrefixes6 is textPrefixes for an IPv6 prefix of /64 or longer. A
// canonical IPv6 name (RFC 5952) writes the 16-bit groups in hex without
// leading zeros, and the longest run of two or more zero groups (the first
// of equal ones) as "::". So the names of the addresses of p whose varying
// groups (those p does not fix entirely) are zero or not in one pattern
// share their text up to the first varying group that is not zero: at
// most 16 patterns for a /64, each one text (an exact name when every
// varying group is zero).
func textPrefixes6(p netip.Prefix) ([]textPrefix, bool) {
	if p.Bits() < 64 || p.Overlaps(v4Mapped) {
		return nil, false
	}
	p = p.Masked()
	if p.IsSingleIP() {
		return []textPrefix{{text: p.Addr().String(), exact: true}}, true
	}
	b := p.Addr().As16()
	var groups [8]uint16
	for i := range groups {
		groups[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	fixed := p.Bits() / 16 // groups 0..fixed-1 are p's alone; the others vary
	varying := 8 - fixed
	var out []textPrefix
	for pattern := range 1 << varying { // bit i set: group fixed+i is zero
		var zero [8]bool
		possible := true
		for i := range groups {
			if i < fixed {
				zero[i] = groups[i] == 0
				continue
			}
			zero[i] = pattern>>(i-fixed)&1 == 1
			// A group with some of p's bits set is never zero; every
			// varying group has a free bit, so it can be non-zero.
			possible = possible && (!zero[i] || groups[i] == 0)
		}
		if !possible {
			continue
		}
		first := slices.Index(zero[fixed:], false) // the first non-zero varying group
		if first < 0 {
			// Every varying group zero: p's first address.
			out = append(out, textPrefix{text: p.Addr().String(), exact: true})
			continue
		}
		out = append(out, textPrefix{text: groupsText(groups, zero, fixed+first)})
	}
	// Drop the texts another covers ("fd00::5:0" is under "fd00::5:"), so
	// no name is read twice.
	slices.SortFunc(out, func(a, b textPrefix) int { return strings.Compare(a.text, b.text) })
	out = slices.Compact(out)
	var kept []textPrefix
	for _, t := range out {
		if !slices.ContainsFunc(out, func(o textPrefix) bool {
			return !o.exact && o != t && strings.HasPrefix(t.text, o.text)
		}) {
			kept = append(kept, t)
		}
	}
	return kept, true
}

// groupsText writes, as a canonical IPv6 name does, groups 0..upTo-1 and
// the separator before group upTo (non-zero), for an address whose zero
// groups are zero.
func groupsText(groups [8]uint16, zero [8]bool, upTo int) string {
	runStart, runEnd := longestZeroRun(zero)
	var b strings.Builder
	for i := 0; i < upTo; {
		if i == runStart {
			b.WriteString("::")
			i = runEnd
			continue
		}
		if i > 0 && i != runEnd {
			b.WriteByte(':')
		}
		b.WriteString(strconv.FormatUint(uint64(groups[i]), 16))
		i++
	}
	if upTo != runEnd || runStart < 0 {
		b.WriteByte(':')
	}
	return b.String()
}

// longestZeroRun returns the first longest run [start, end) of two or more
// zero groups, or -1, -1.
func longestZeroRun(zero [8]bool) (start, end int) {
	start, end = -1, -1
	for i := 0; i < len(zero); {
		if !zero[i] {
			i++
			continue
		}
		j := i
		for j < len(zero) && zero[j] {
			j++
		}
		if j-i >= 2 && j-i > end-start {
			start, end = i, j
		}
		i = j
	}
	return start, end
}
