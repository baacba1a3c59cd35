// Package addrindex finds the IPAddress objects inside a prefix without
// reading every IPAddress of the cluster.
//
// It adds an index to an IPAddress informer that files each object under
// the block of address space its name falls in: the IPv4 /24 or the IPv6
// /112 that contains it. The IPAddresses inside a prefix are then those of
// the blocks the prefix covers (one block for a prefix at least as long as
// a block), filtered by the prefix. A prefix that spans more than MaxBlocks
// blocks (an IPv6 /64) is answered from the whole cache.
//
// Why: without it, the ServiceCIDR controller and the allocators read and
// parse every IPAddress once per ServiceCIDR change; with 100,000
// IPAddresses and a ServiceCIDR added and another deleted every 2 s
// (hack/scale.sh), that is about a quarter of the server's CPU at 90% fill.
//
// A Geometry names blocks of another size for an index of another kind of
// object (the IPAddress repair's of Services by ClusterIP, blocks of 16
// addresses).
//
// Invariant: In returns the same objects as a scan of the whole cache
// filtered by the prefixes would, whatever the index holds, and Addresses
// their addresses; an informer without the index is scanned.
package addrindex

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"
)

// Name is the name of the index in the informer.
const Name = "ipaddress-block"

const (
	v4BlockBits = 24  // 256 addresses an IPv4 block
	v6BlockBits = 112 // 65,536 addresses an IPv6 block
)

// MaxBlocks is the most blocks In looks up for one call; wider prefixes
// are answered by scanning the whole cache, which is cheaper by then.
const MaxBlocks = 1 << 12

// Add adds the index to inf, once: a second call (another consumer of the
// same shared informer) finds it there. The informer may be running.
func Add(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[Name]; ok {
		return nil
	}
	err := inf.AddIndexers(cache.Indexers{Name: indexFunc})
	if err != nil {
		if _, ok := inf.GetIndexer().GetIndexers()[Name]; ok {
			return nil // added meanwhile by another consumer
		}
		return fmt.Errorf("add the %s index to the IPAddress informer: %w", Name, err)
	}
	return nil
}

// indexFunc files an IPAddress under its block; an object whose name is
// not an address is filed nowhere (In finds it only by a full scan, and no
// prefix contains it anyway).
func indexFunc(obj any) ([]string, error) {
	_, addr, ok := addressOf(obj)
	if !ok {
		return nil, nil
	}
	return []string{BlockKey(addr)}, nil
}

// addressOf returns obj as an IPAddress and the address its name is, or
// false when it is not an IPAddress named by an address.
func addressOf(obj any) (*networkingv1.IPAddress, netip.Addr, bool) {
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return nil, netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(ipa.Name)
	if err != nil {
		return nil, netip.Addr{}, false
	}
	return ipa, addr, true
}

// Geometry is the size of a block of each family, in prefix bits: a
// block is the prefix of that length holding an address. An index of
// another kind of object may file it under blocks of its own size (the
// IPAddress repair's of Services, blocks of 16 addresses) and name them
// with its Geometry; BlockKey and BlockKeys name this package's own.
type Geometry struct{ V4, V6 int }

// indexBlocks is the geometry of this package's index: the IPv4 /24 and
// the IPv6 /112.
var indexBlocks = Geometry{V4: v4BlockBits, V6: v6BlockBits}

// Block returns the block of g that contains addr (zone dropped).
func (g Geometry) Block(addr netip.Addr) netip.Prefix { return g.blockOf(addr.WithZone("")) }

// blockOf returns the block that contains addr.
func (g Geometry) blockOf(addr netip.Addr) netip.Prefix {
	bits := g.V6
	if addr.Is4() {
		bits = g.V4
	}
	p, _ := addr.Prefix(bits) // bits is within addr's length
	return p
}

func blockKey(p netip.Prefix) string { return p.String() }

// BlockKey names the block of g that holds addr, as an index over g files
// it.
func (g Geometry) BlockKey(addr netip.Addr) string { return blockKey(g.blockOf(addr.WithZone(""))) }

// BlockKeys names the blocks of g that prefixes cover, each once; false
// when they are more than MaxBlocks, for which a scan of every object is
// cheaper. Prefixes that are not valid cover nothing.
func (g Geometry) BlockKeys(prefixes []netip.Prefix) ([]string, bool) {
	var keys []string
	seen := map[string]bool{}
	budget := MaxBlocks
	for _, p := range prefixes {
		if !p.IsValid() {
			continue
		}
		bs, ok := g.blocks(p, budget)
		if !ok {
			return nil, false
		}
		budget -= len(bs)
		for _, b := range bs {
			if k := blockKey(b); !seen[k] { // overlapping prefixes
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys, true
}

// BlockKey names the block of the index that holds addr.
func BlockKey(addr netip.Addr) string { return indexBlocks.BlockKey(addr) }

// BlockKeys names the blocks of the index that prefixes cover
// (Geometry.BlockKeys).
func BlockKeys(prefixes []netip.Prefix) ([]string, bool) { return indexBlocks.BlockKeys(prefixes) }

// blocks returns the blocks of g that p covers, or ok false when they are
// more than limit.
func (g Geometry) blocks(p netip.Prefix, limit int) (out []netip.Prefix, ok bool) {
	p = p.Masked()
	bits := g.V6
	if p.Addr().Is4() {
		bits = g.V4
	}
	if p.Bits() >= bits {
		return []netip.Prefix{g.blockOf(p.Addr())}, true
	}
	if bits-p.Bits() > 30 || 1<<(bits-p.Bits()) > limit {
		return nil, false
	}
	n := 1 << (bits - p.Bits())
	out = make([]netip.Prefix, 0, n)
	for b := g.blockOf(p.Addr()); len(out) < n; {
		out = append(out, b)
		next, ok := nextBlock(b)
		if !ok {
			break
		}
		b = next
	}
	return out, true
}

// nextBlock returns the block right after b, or false at the end of the
// address space.
func nextBlock(b netip.Prefix) (netip.Prefix, bool) {
	last := b.Addr()
	// The last address of b: set every host bit.
	bytes := last.AsSlice()
	for i := b.Bits(); i < len(bytes)*8; i++ {
		bytes[i/8] |= 1 << (7 - i%8)
	}
	end, _ := netip.AddrFromSlice(bytes)
	next := end.Next()
	if !next.IsValid() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(next, b.Bits()), true
}

// In returns the IPAddresses of indexer whose names are addresses inside
// one of prefixes, each once. Prefixes that are not valid select nothing.
func In(indexer cache.Indexer, prefixes []netip.Prefix) ([]*networkingv1.IPAddress, error) {
	var out []*networkingv1.IPAddress
	err := walk(indexer, prefixes, indexer.List, func(b string) ([]any, error) { return indexer.ByIndex(Name, b) }, func(obj any) {
		if ipa, addr, ok := addressOf(obj); ok && contains(prefixes, addr) {
			out = append(out, ipa)
		}
	})
	return out, err
}

// Addresses returns the addresses of the IPAddresses In returns whose
// names parse (netip.ParseAddr, or a stricter parser such as
// subrange.ParseAddr), in no particular order. It reads the keys of
// indexer's store and index, not the objects: an IPAddress is
// cluster-scoped, so an informer files it under its name. The addresses
// of a wide prefix are read this way at a key per address, where In looks
// each object up and reads its name.
func Addresses(indexer cache.Indexer, prefixes []netip.Prefix, parse func(string) (netip.Addr, error)) ([]netip.Addr, error) {
	var out []netip.Addr
	err := walk(indexer, prefixes, indexer.ListKeys, func(b string) ([]string, error) { return indexer.IndexKeys(Name, b) }, func(name string) {
		if addr, err := parse(name); err == nil && contains(prefixes, addr) {
			out = append(out, addr)
		}
	})
	return out, err
}

// walk calls keep on each entry (an object or a key) that block returns
// for the blocks of indexer's index that prefixes cover, or on each that
// all returns when indexer has no index or the prefixes cover more than
// MaxBlocks.
func walk[T any](indexer cache.Indexer, prefixes []netip.Prefix, all func() []T, block func(string) ([]T, error), keep func(T)) error {
	blocks, scan := blocksOf(indexer, prefixes)
	if scan {
		for _, e := range all() {
			keep(e)
		}
		return nil
	}
	for _, b := range blocks {
		entries, err := block(b)
		if err != nil {
			return fmt.Errorf("IPAddresses in block %s: %w", b, err)
		}
		for _, e := range entries {
			keep(e)
		}
	}
	return nil
}

// blocksOf names the blocks of indexer's index that prefixes cover; scan
// when indexer has no index or the prefixes cover more than MaxBlocks.
func blocksOf(indexer cache.Indexer, prefixes []netip.Prefix) (blocks []string, scan bool) {
	_, indexed := indexer.GetIndexers()[Name]
	blocks, ok := BlockKeys(prefixes)
	return blocks, !indexed || !ok
}

// contains reports whether one of prefixes, valid, holds addr.
func contains(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.IsValid() && p.Contains(addr) {
			return true
		}
	}
	return false
}
