package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/servicecidr"
)

// etcdLiveNames is the ServiceCIDR controller's live read in the server
// (servicecidr.LiveNames): before a deleted ServiceCIDR goes, the names of
// the IPAddresses under its prefixes, read from etcd's keys (keys only, a
// linearizable read) instead of a list of every IPAddress of the family.
// An IPAddress's key ends in its name, the canonical text of its address,
// so the IPv4 addresses of a prefix of /8 or longer are the keys under at
// most 128 text prefixes ("10.96.5." for 10.96.5.0/24). Other prefixes
// (IPv6, whose canonical text compresses zeros; IPv4 wider than /8) are
// read by listing.
type etcdLiveNames struct {
	etcd   *clientv3.Client
	layout etcdlayout.Layout
	list   servicecidr.LiveNames
}

// maxOpsPerTxn stays under etcd's default --max-txn-ops (128).
const maxOpsPerTxn = 64

func (l etcdLiveNames) Names(ctx context.Context, prefixes []netip.Prefix) ([]string, error) {
	var ops []clientv3.Op
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
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				names = append(names, strings.TrimPrefix(string(kv.Key), root))
			}
		}
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

// textPrefixes returns the texts that the canonical names of p's addresses,
// and no others, start with (or are, when exact); false when p is not IPv4
// or wider than /8 (256 texts or more).
func textPrefixes(p netip.Prefix) ([]textPrefix, bool) {
	if !p.IsValid() || !p.Addr().Is4() || p.Bits() < 8 {
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
