// Package drypick is the warning by which the admission webhook names the
// ClusterIPs a dry-run create would get, and its parser.
//
// Why a warning: kube-apiserver's dry run of a Service create picks no
// real address (it answers an address of one of its ServiceCIDRs without
// looking at what is free, draining or scoped), and it checks a requested
// address against one of its ServiceCIDRs only, refusing addresses of the
// others. So the webhook cannot patch a dry run with its pick (the dry run
// would be refused) and lets it through unchanged; the warning, which
// kube-apiserver passes to the client, carries what the create would get.
// `allocator renumber` reads it (internal/renumber) to plan a move.
package drypick

import (
	"net/netip"
	"strings"
)

// prefix starts the warning; the addresses follow, comma-separated, in the
// order of the Service's families.
const prefix = "dry run: the create would get ClusterIP(s) "

// Warning is the warning naming picks, each a canonical address.
func Warning(picks []string) string { return prefix + strings.Join(picks, ",") }

// Parse returns the addresses a warning of Warning names; false for any
// other text, or a list with an entry that is not a canonical address.
func Parse(text string) ([]netip.Addr, bool) {
	rest, ok := strings.CutPrefix(text, prefix)
	if !ok || rest == "" {
		return nil, false
	}
	var out []netip.Addr
	for _, s := range strings.Split(rest, ",") {
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.String() != s {
			return nil, false
		}
		out = append(out, addr)
	}
	return out, true
}
