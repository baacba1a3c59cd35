package iprepair

import (
	"net/netip"
	"slices"
	"strings"
)

// keys returns the names of the cached IPAddresses and the held keys that
// name none: a held address almost always has its IPAddress, so the keys
// sorted are about one per address, not one per address and Service. An
// IPAddress cached after the list and held is left to its event. The
// names are the store's keys (an IPAddress has no namespace), read
// without a list of the objects. The names are parsed and sorted on a
// goroutine of their own while this one looks for the held keys that name
// none: the two halves cost about the same, and the first pass at a
// server's start, which readiness waits for, has the machine's cores
// mostly to itself.
func (v *informerView) keys() ([]string, error) {
	var names []parsedKey
	done := make(chan struct{})
	go func() {
		defer close(done)
		names = sortedKeys(v.ipIndexer.ListKeys())
	}()
	var missing []string
	for _, k := range v.heldKeys() {
		if _, exists, err := v.ipIndexer.GetByKey(k); err != nil || !exists {
			missing = append(missing, k)
		}
	}
	<-done
	return mergeKeys(names, sortedKeys(missing)), nil
}

// parsedKey is a work key with the address it names, if it names one:
// each key is parsed once, not in every comparison of a sort.
type parsedKey struct {
	addr netip.Addr
	ok   bool
	key  string
}

// compareKeys orders addresses first (IPv4 before IPv6, numerically), then
// invalid ClusterIPs and names that are no address, by text.
func compareKeys(a, b parsedKey) int {
	switch {
	case a.ok && b.ok:
		return a.addr.Compare(b.addr)
	case a.ok:
		return -1
	case b.ok:
		return 1
	}
	return strings.Compare(a.key, b.key)
}

// sortedKeys returns keys parsed and in compareKeys's order.
func sortedKeys(keys []string) []parsedKey {
	all := make([]parsedKey, len(keys))
	for i, k := range keys {
		addr, err := netip.ParseAddr(k)
		all[i] = parsedKey{addr: addr, ok: err == nil, key: k}
	}
	slices.SortFunc(all, compareKeys)
	return all
}

// sortKeys sorts keys in compareKeys's order.
func sortKeys(keys []string) {
	for i, p := range sortedKeys(keys) {
		keys[i] = p.key
	}
}

// mergeKeys merges two sorted lists into one, each key once.
func mergeKeys(a, b []parsedKey) []string {
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		var next parsedKey
		if len(b) == 0 || (len(a) > 0 && compareKeys(a[0], b[0]) <= 0) {
			next, a = a[0], a[1:]
		} else {
			next, b = b[0], b[1:]
		}
		if len(out) == 0 || out[len(out)-1] != next.key {
			out = append(out, next.key)
		}
	}
	return out
}
