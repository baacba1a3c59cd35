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
	held  map[netip.Addr][]*corev1.Service
	text  []byte // an address's canonical text, reused
}

// holders is informerView.holders, from the block's memory. The slice is
// shared with the next keys of the block: read it, do not change it (an
// append copies it).
func (m *blockMemo) holders(key string) ([]*corev1.Service, error) {
	ip, err := netip.ParseAddr(key)
	if err != nil || ip.Zone() != "" {
		return m.informerView.holders(key) // not an address key: looked up as it is
	}
	if m.text = ip.AppendTo(m.text[:0]); string(m.text) != key {
		return m.informerView.holders(key) // not canonical: no work key's spelling
	}
	if block := holderBlocks.Block(ip); !m.block.IsValid() || block != m.block {
		held, err := m.blockHolders(block)
		if err != nil {
			return nil, err
		}
		m.block, m.held = block, held
	}
	svcs := m.held[ip]
	return svcs[:len(svcs):len(svcs)], nil
}

// blockHolders reads the Services filed under block and returns, for each
// address of the block one of them holds, its holders oldest first.
func (v *informerView) blockHolders(block netip.Prefix) (map[netip.Addr][]*corev1.Service, error) {
	objs, err := v.serviceIndexer.ByIndex(serviceIndex, block.String())
	if err != nil {
		return nil, fmt.Errorf("cached services holding addresses of %s: %w", block, err)
	}
	held := map[netip.Addr][]*corev1.Service{}
	for _, obj := range objs {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		for _, ip := range holding.IPs(svc) {
			if block.Contains(ip) {
				held[ip] = append(held[ip], svc)
			}
		}
	}
	for _, svcs := range held {
		slices.SortFunc(svcs, report.OldestFirst)
	}
	return held, nil
}
