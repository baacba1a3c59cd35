package iprepair

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/repair/report"
)

// chunkView is the view one chunk of a full pass reads its keys through:
// an informer view's holders are read block by block (blockMemo); any
// other view as it is.
func chunkView(view ipView) ipView {
	if iv, ok := view.(*informerView); ok {
		return &blockMemo{informerView: iv}
	}
	return view
}

// blockMemo is an informer view that keeps the holders of the addresses
// of the last holder block it read. A pass's keys come sorted, so the
// addresses of one block come one after another; informerView.holders
// reads every Service filed under the block for each address of it and
// parses their ClusterIPs, sixteen times over where the block is full
// (a /12 at 86%). Here each Service of a block is read once per block.
// The memory is one block's, kept while that block's addresses are
// reconciled: a Service changed meanwhile is seen at the block's next
// read, as an informer that lags shows it. One chunk at a time: not safe
// for concurrent use.
type blockMemo struct {
	*informerView
	block netip.Prefix
	// The block's holders: held[i] holds addrs[i], sorted by address, then
	// oldest first; one allocation each per block.
	addrs   []netip.Addr
	held    []*corev1.Service
	scratch []netip.Addr // a Service's addresses, reused
}

// holders is informerView.holders, from the block's memory. The slice is
// shared with the next keys of the block: read it, do not change it (an
// append copies it).
func (m *blockMemo) holders(key string) ([]*corev1.Service, error) {
	ip, canonical := parseAddressKey(key)
	if !canonical || ip.Zone() != "" {
		return m.informerView.holders(key) // not an address's work key: looked up as it is
	}
	if block := holderBlocks.Block(ip); !m.block.IsValid() || block != m.block {
		if err := m.readBlock(block); err != nil {
			return nil, err
		}
		m.block = block
	}
	first, found := slices.BinarySearchFunc(m.addrs, ip, netip.Addr.Compare)
	if !found {
		return nil, nil
	}
	end := first + 1
	for end < len(m.addrs) && m.addrs[end] == ip {
		end++
	}
	return m.held[first:end:end], nil
}

// readBlock reads the Services filed under block and keeps, for each
// address of the block one of them holds, its holders oldest first.
func (m *blockMemo) readBlock(block netip.Prefix) error {
	objs, err := m.serviceIndexer.ByIndex(serviceIndex, block.String())
	if err != nil {
		return fmt.Errorf("cached services holding addresses of %s: %w", block, err)
	}
	type held struct {
		addr netip.Addr
		svc  *corev1.Service
	}
	var all []held
	for _, obj := range objs {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		m.scratch, _ = holding.AppendClusterIPs(m.scratch[:0], svc)
		for _, ip := range m.scratch {
			if block.Contains(ip) {
				all = append(all, held{ip, svc})
			}
		}
	}
	slices.SortFunc(all, func(a, b held) int {
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		return report.OldestFirst(a.svc, b.svc)
	})
	m.addrs, m.held = make([]netip.Addr, len(all)), make([]*corev1.Service, len(all))
	for i, h := range all {
		m.addrs[i], m.held[i] = h.addr, h.svc
	}
	return nil
}

// parseAddressKey reads a work key as an address; canonical says whether
// the key is that address's canonical spelling (netip.Addr.String), which
// every address's work key is.
func parseAddressKey(key string) (ip netip.Addr, canonical bool) {
	ip, err := netip.ParseAddr(key)
	if err != nil {
		return netip.Addr{}, false
	}
	var buf [64]byte
	return ip, string(ip.AppendTo(buf[:0])) == key
}
