package renumber

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// Offset is a moved address of --from's static band and the address at the
// same distance from the network address of the range it moves to
// (10.96.0.10 of 10.96.0.0/16 becomes 10.100.0.10 of 10.100.0.0/16).
type Offset struct {
	Old netip.Addr `json:"old"`
	New netip.Addr `json:"new"`
	// N is the distance from the prefix's network address (10 above).
	N uint64 `json:"offset"`
}

// ErrOffsetBeyond matches KeepOffset's error for a target range that has no
// usable address at the offset.
var ErrOffsetBeyond = errors.New("beyond the usable addresses")

// KeepOffset maps ip, a moved address of from, to the address at the same
// offset in to. static is false when ip does not lie in from's static band
// (subrange: the lower min(max(16, size/16), 256) addresses, the ones users
// choose): such an address moves as any other and has no Offset. The
// offset is kept whatever band of to it lands in: the static band only
// steers dynamic picks away from it, and a user-chosen request may name
// any usable address. err says why to cannot hold it: another family, or
// an offset beyond its usable addresses (ErrOffsetBeyond).
func KeepOffset(from, to netip.Prefix, ip netip.Addr) (off Offset, static bool, err error) {
	src, err := subrange.New(from, model.IPAddress)
	if err != nil {
		return Offset{}, false, err
	}
	if !src.InStaticBand(ip) {
		return Offset{}, false, nil
	}
	i, _ := src.Index(ip)
	off = Offset{Old: ip, N: i + 1} // the index counts from the first usable address, network+1
	if to.Addr().Is6() != ip.Is6() {
		return off, true, fmt.Errorf("%s is %s, %s is not", ip, subrange.FamilyName(ip.Is6()), to)
	}
	dst, err := subrange.New(to, model.IPAddress)
	if err != nil {
		return off, true, err
	}
	addr, ok := dst.Addr(i)
	if !ok {
		return off, true, fmt.Errorf("offset %d is %w of %s (%d)", off.N, ErrOffsetBeyond, to, dst.Size())
	}
	off.New = addr
	return off, true, nil
}

// offsetAdvice ends a refusal to move a static-band Service: what the
// operator can do about it.
const offsetAdvice = "left where it is, so what names the address (a kubelet's clusterDNS, say) keeps working: " +
	"free that address, give --to a range that holds it, or pass --keep-static-offsets=false to move it to any free address"

// choose returns the pins of c's re-create and the offsets among them. The
// moved addresses of --from's static band keep their offset (KeepOffset),
// unless keep is false: in --to's CIDR of their family, or, without --to,
// in the open range the server picks from for c (the narrowest open
// ServiceCIDR CIDR holding a dry run's pick, so scopes and lifecycles choose
// the range as for any create). The other moved addresses come from --to's
// Picker; without --to they are left to the server, or pinned to the dry
// run's picks when an offset is pinned beside them (the API refuses an
// empty entry before a given one).
func (r *runner) choose(ctx context.Context, c Candidate, keep bool) (Pins, []Offset, error) {
	var statics []netip.Addr
	if keep {
		statics = r.inStaticBand(c.Moved)
	}
	if len(statics) == 0 {
		pins, err := r.pick(c, nil)
		return pins, nil, err
	}
	targets := map[bool]netip.Prefix{}
	var pins Pins
	if r.picker != nil {
		static := map[bool]bool{}
		for _, ip := range statics {
			static[ip.Is6()] = true
		}
		var err error
		if pins, err = r.pick(c, static); err != nil {
			return nil, nil, err
		}
		for v6 := range static {
			target, _ := r.picker.Range(v6) // present: pick refuses a family --to lacks
			targets[v6] = target.Prefix()
		}
	} else {
		var err error
		if pins, err = r.serverPicks(ctx, c); err != nil {
			return nil, nil, err
		}
		for _, ip := range statics {
			if targets[ip.Is6()], err = r.openPrefixHolding(ctx, pins[ip.Is6()]); err != nil {
				return nil, nil, err
			}
		}
	}
	var offsets []Offset
	for _, ip := range statics {
		off, err := r.keepOffset(ip, targets[ip.Is6()])
		if err != nil {
			return nil, nil, err
		}
		pins[ip.Is6()] = off.New
		offsets = append(offsets, off)
	}
	return pins, offsets, nil
}

// inStaticBand returns the addresses of ips in the static band of --from's
// CIDR of their family.
func (r *runner) inStaticBand(ips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		for _, p := range r.prefixes {
			if src, err := subrange.New(p, model.IPAddress); err == nil && src.InStaticBand(ip) {
				out = append(out, ip)
				break
			}
		}
	}
	return out
}

// keepOffset maps ip to its offset in target, or says why it cannot move
// there: the offset is beyond target, lands inside --from, or is held.
func (r *runner) keepOffset(ip netip.Addr, target netip.Prefix) (Offset, error) {
	from := r.prefixes[slices.IndexFunc(r.prefixes, func(p netip.Prefix) bool { return p.Contains(ip) })]
	off, _, err := KeepOffset(from, target, ip)
	switch {
	case err != nil:
		return off, fmt.Errorf("%s is in the static band of %s and keeps its offset %d, which %s cannot hold (%v); %s",
			ip, from, off.N, target, err, offsetAdvice)
	case slices.ContainsFunc(r.prefixes, func(p netip.Prefix) bool { return p.Contains(off.New) }):
		return off, fmt.Errorf("%s is in the static band of %s and keeps its offset %d: %s of %s is inside --from %s; %s",
			ip, from, off.N, off.New, target, r.cfg.From, offsetAdvice)
	}
	if holder := r.holders[off.New]; holder != "" {
		return off, offsetTaken(off, holder)
	}
	return off, nil
}

// offsetTaken is the refusal of a move whose offset address is held.
func offsetTaken(off Offset, holder string) error {
	return fmt.Errorf("%s is in the static band and keeps its offset %d as %s, which %s holds; %s", off.Old, off.N, off.New, holder, offsetAdvice)
}

// takenOffset returns the offset whose address a dry run's refusal names
// as allocated, if any.
func takenOffset(err error, offsets []Offset) (Offset, bool) {
	if !isTaken(err) {
		return Offset{}, false
	}
	for _, off := range offsets {
		if strings.Contains(err.Error(), "failed to allocate IP "+off.New.String()+":") {
			return off, true
		}
	}
	return Offset{}, false
}

// serverPicks returns the addresses a server-side dry run of c's probe
// picks in its moved families.
func (r *runner) serverPicks(ctx context.Context, c Candidate) (Pins, error) {
	probed, err := r.dryRunCreate(ctx, Probe(c, nil))
	if err != nil {
		return nil, fmt.Errorf("the API refuses its re-create: %w", err)
	}
	pins := Pins{}
	for _, ip := range holding.IPs(probed) {
		if err := r.checkPick(ctx, ip); err != nil {
			return nil, err
		}
		pins[ip.Is6()] = ip
	}
	for _, ip := range c.Moved {
		if _, ok := pins[ip.Is6()]; !ok {
			return nil, fmt.Errorf("the dry run of its re-create picked no %s address (%v)", subrange.FamilyName(ip.Is6()), probed.Spec.ClusterIPs)
		}
	}
	return pins, nil
}

// openPrefixHolding returns the narrowest CIDR holding addr among the
// ServiceCIDRs that take new addresses (not draining, not being deleted),
// listed once per run.
func (r *runner) openPrefixHolding(ctx context.Context, addr netip.Addr) (netip.Prefix, error) {
	open, err := r.openPrefixes(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	best := netip.Prefix{}
	for _, p := range open {
		if p.Contains(addr) && (!best.IsValid() || p.Bits() > best.Bits()) {
			best = p
		}
	}
	if !best.IsValid() {
		return best, fmt.Errorf("the server picked %s, which no open ServiceCIDR listed at the start holds: run again", addr)
	}
	return best, nil
}

// openPrefixes lists the CIDRs of the ServiceCIDRs that take new addresses,
// on the first call.
func (r *runner) openPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	r.openMu.Lock()
	defer r.openMu.Unlock()
	if r.open != nil {
		return r.open, nil
	}
	list, err := r.client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ServiceCIDRs (the range a static-band address keeps its offset in): %w", err)
	}
	open := []netip.Prefix{}
	for i := range list.Items {
		if sc := &list.Items[i]; takesNew(sc) {
			for _, text := range sc.Spec.CIDRs {
				if p, err := netip.ParsePrefix(text); err == nil {
					open = append(open, p)
				}
			}
		}
	}
	r.open = open
	return open, nil
}

// takesNew reports whether sc takes new addresses: not draining, not being
// deleted.
func takesNew(sc *networkingv1.ServiceCIDR) bool {
	mode, _ := lifecycle.Parse(sc.Annotations)
	return mode != lifecycle.Draining && sc.DeletionTimestamp == nil
}

// reserveOffsets marks the --to addresses the static-band Services of
// movable keep their offsets as taken in the Picker, so that no dynamic pick
// of the run hands one to another Service first.
func (r *runner) reserveOffsets(movable []Candidate) {
	if r.picker == nil || r.cfg.IgnoreStaticBand {
		return
	}
	for _, c := range movable {
		for _, ip := range r.inStaticBand(c.Moved) {
			target, ok := r.picker.Range(ip.Is6())
			if !ok {
				continue
			}
			if off, err := r.keepOffset(ip, target.Prefix()); err == nil {
				r.picker.Taken(off.New)
			}
		}
	}
}

// offsetChanges lists the offsets created does not hold (the address was
// taken while the Service was gone), and keptOffsets the ones it does.
func offsetChanges(offsets []Offset, created []netip.Addr) (changes []string) {
	for _, off := range offsets {
		if slices.Contains(created, off.New) {
			continue
		}
		now := "gone"
		for _, ip := range created {
			if ip.Is6() == off.New.Is6() {
				now = ip.String()
			}
		}
		changes = append(changes, fmt.Sprintf("static-band address %s was to keep its offset %d as %s, is now %s", off.Old, off.N, off.New, now))
	}
	return changes
}

// keptOffsets returns the offsets whose address created holds.
func keptOffsets(offsets []Offset, created []netip.Addr) []Offset {
	var out []Offset
	for _, off := range offsets {
		if slices.Contains(created, off.New) {
			out = append(out, off)
		}
	}
	return out
}
