package iprepair

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/internal/lazy"
	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// invalidKeyPrefix marks the work key of a ClusterIP that does not parse, so
// that such keys never collide with an address.
const invalidKeyPrefix = "!"

// serviceIndex is the name of the index the repair adds to the Service
// informer: each Service filed under the holder block (holderBlocks) of
// each of its ClusterIPs, and under invalidKeyPrefix and the text of each
// one that does not parse. The holders of an address are those of its
// block's few Services that hold it (holders); the addresses held inside a
// ServiceCIDR's prefixes, those of the blocks they cover (heldInside). An
// entry per address would be a set of one Service each: a tenth of the
// server's heap at a million Services.
const serviceIndex = "repair.allocator/clusterIP-holders"

// holderBlocks are blocks of 16 addresses of either family, so that a
// block's Services are few to check even where every address is held.
var holderBlocks = addrindex.Geometry{V4: 28, V6: 124}

// serviceIndexers are the repair's indexes of the Service informer.
var serviceIndexers = cache.Indexers{
	serviceIndex: func(obj any) ([]string, error) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return nil, nil
		}
		return holderKeys(svc), nil
	},
}

// holderKey names the holder block of ip in serviceIndex.
func holderKey(ip netip.Addr) string { return holderBlocks.BlockKey(ip) }

// holderKeys returns the keys serviceIndex files svc under, each once: the
// holder blocks of its addresses, then invalidKeyPrefix and the text of each
// ClusterIP that does not parse.
func holderKeys(svc *corev1.Service) []string {
	ips, invalid := holding.ClusterIPs(svc)
	keys := make([]string, 0, len(ips)+len(invalid))
	for _, ip := range ips {
		if k := holderKey(ip); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, text := range invalid {
		keys = append(keys, invalidKeyPrefix+text)
	}
	return keys
}

// addressKeys returns the work keys of a Service's ClusterIPs (holding.ClusterIPs),
// each once: the canonical addresses, then invalidKeyPrefix and the text of
// each one that does not parse.
func addressKeys(svc *corev1.Service) []string {
	keys, _ := appendAddressKeys(nil, nil, svc)
	return keys
}

// appendAddressKeys appends svc's work keys (addressKeys) to keys, reading
// its addresses into scratch, which it returns for the next Service. An
// address's key is the Service's own text of it where that is canonical
// (holding.CanonicalText): a pass over every Service allocates no key.
func appendAddressKeys(keys []string, scratch []netip.Addr, svc *corev1.Service) ([]string, []netip.Addr) {
	ips, invalid := holding.AppendClusterIPs(scratch[:0], svc)
	for _, ip := range ips {
		keys = append(keys, holding.CanonicalText(ip, svc))
	}
	for _, text := range invalid {
		keys = append(keys, invalidKeyPrefix+text)
	}
	return keys, ips
}

// serviceCIDRs is the union of the prefixes of every ServiceCIDR, ready or
// not: an address of a terminating ServiceCIDR is still allocated until its
// Service goes, so it is in range for the repair.
type serviceCIDRs struct {
	ranges []subrange.Range
	// byPrefix finds the ranges holding an address (positions in ranges)
	// without a look at each: the repair asks for every address it
	// reconciles, so a scan of the ranges would make every create cost in
	// proportion to the ServiceCIDRs.
	byPrefix *prefixindex.Index[int]
	// wide are IPv6 prefixes the IPAddress model refuses to allocate from
	// (shorter than /64); their addresses are still not "out of range".
	wide []netip.Prefix
	// scoped: some ServiceCIDR is scoped; entries are then every
	// ServiceCIDR's served ranges with its scope, for outOfScope.
	scoped  bool
	entries []cidrEntry
}

// cidrEntry is one range of one ServiceCIDR with its scope (nil: unscoped).
type cidrEntry struct {
	name  string
	scope *scope.Scope
	rng   subrange.Range
}

func newServiceCIDRs(cidrs []*networkingv1.ServiceCIDR) serviceCIDRs {
	var s serviceCIDRs
	var entries []prefixindex.Entry[int]
	for _, sc := range cidrs {
		sco, scopeErr := scope.Parse(sc.Annotations)
		s.scoped = s.scoped || sco != nil
		for _, text := range sc.Spec.CIDRs {
			prefix, err := subrange.ParsePrefix(text)
			if err != nil {
				continue
			}
			rng, err := subrange.New(prefix, model.IPAddress)
			if err != nil {
				s.wide = append(s.wide, prefix)
				continue
			}
			entries = append(entries, prefixindex.Entry[int]{Prefix: rng.Prefix(), Value: len(s.ranges)})
			s.ranges = append(s.ranges, rng)
			if scopeErr == nil { // the allocator serves none of a bad scope's addresses; nothing to judge
				s.entries = append(s.entries, cidrEntry{name: sc.Name, scope: sco, rng: rng})
			}
		}
	}
	s.byPrefix = prefixindex.New(entries)
	return s
}

// outOfScope reports whether a Service in a namespace with nsLabels and
// with svcLabels holds ip outside every ServiceCIDR its scope lets it use
// (the allocator's rule, scope.Verdict, over ip's family), and if so the
// ServiceCIDRs it may use.
func (s serviceCIDRs) outOfScope(ip netip.Addr, nsLabels, svcLabels labels.Set) (bool, []string) {
	if !s.scoped {
		return false, nil
	}
	family := func(e cidrEntry) bool { return e.rng.Prefix().Addr().Is6() == ip.Is6() }
	var verdict scope.Verdict
	in := make(map[int]bool) // entries whose scope the Service is in
	for i, e := range s.entries {
		if e.scope != nil && family(e) {
			in[i] = e.scope.Matches(nsLabels, svcLabels)
			verdict.Note(e.scope, in[i])
		}
	}
	var allowed []string
	for i, e := range s.entries {
		if !family(e) || (e.scope == nil && !verdict.Unscoped()) || (e.scope != nil && !in[i]) {
			continue
		}
		if e.rng.Contains(ip) {
			return false, nil
		}
		allowed = append(allowed, e.name)
	}
	slices.Sort(allowed)
	return true, slices.Compact(allowed)
}

// cidrPrefixes returns the prefixes a ServiceCIDR names (those that parse).
func cidrPrefixes(sc *networkingv1.ServiceCIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, text := range sc.Spec.CIDRs {
		if p, err := netip.ParsePrefix(text); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

func (s serviceCIDRs) empty() bool { return len(s.ranges) == 0 && len(s.wide) == 0 }

// contains reports whether ip is a usable address of some ServiceCIDR (not a
// network address, not an IPv4 broadcast address), as upstream's
// servicecidr.ContainsIP.
func (s serviceCIDRs) contains(ip netip.Addr) bool {
	var buf [8]int
	for _, i := range s.byPrefix.AppendContaining(buf[:0], ip) {
		if s.ranges[i].Contains(ip) {
			return true
		}
	}
	for _, p := range s.wide {
		if p.Contains(ip) && ip != p.Addr() {
			return true
		}
	}
	return false
}

// ipView is what a repair pass reads: a snapshot from fresh lists
// (RunOnce) or the informers' caches (Run). Writes never trust it alone: each
// is preceded by fresh reads and made conditional (see IPAddressRepair).
type ipView interface {
	// keys returns every work key: the addresses and invalid ClusterIPs of
	// all Services and the names of all IPAddresses.
	keys() ([]string, error)
	// holders returns the Services holding the key, oldest first.
	holders(key string) ([]*corev1.Service, error)
	// ipAddress returns the IPAddress named name, nil if there is none.
	ipAddress(name string) (*networkingv1.IPAddress, error)
	// service returns the Service, nil if there is none.
	service(namespace, name string) (*corev1.Service, error)
	cidrs() (serviceCIDRs, error)
	// namespaceLabels returns a namespace's labels; a namespace not found
	// has only the name label every namespace carries.
	namespaceLabels(name string) (labels.Set, error)
	counts() (services, ipAddresses int, err error)
}

// listView is a snapshot of consistent lists, for one-shot passes that run
// without informers (the standalone job).
type listView struct {
	byKey    map[string][]*corev1.Service
	services map[string]*corev1.Service
	ips      map[string]*networkingv1.IPAddress
	ranges   serviceCIDRs
	// namespaces are listed only when some ServiceCIDR is scoped.
	namespaces map[string]labels.Set
}

// newListView lists IPAddresses, then ServiceCIDRs, then Services. An
// address is claimed before its Service is stored, so a Service created
// during the lists may show up without the IPAddress it already has; the
// repair's create then meets AlreadyExists and judges the object it finds.
// The reverse order would let a Service deleted between the lists look like
// it lost its IPAddress, and the repair would re-create it.
//
// What orders the lists is the revision each is read at, which its first
// page fixes: the IPAddresses' first page is read before the Services'
// first page, and then the rest of both lists are read at once: the two
// lists, linear in the objects, overlap instead of adding up.
func newListView(ctx context.Context, client kubernetes.Interface) (*listView, error) {
	v := &listView{
		byKey:    map[string][]*corev1.Service{},
		services: map[string]*corev1.Service{},
	}
	ipPages, err := firstIPAddressPage(ctx, client)
	if err != nil {
		return nil, err
	}
	if err := v.listRanges(ctx, client); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ipErr error
	ipsDone := make(chan struct{})
	go func() {
		defer close(ipsDone)
		v.ips, ipErr = ipPages.rest(ctx)
	}()
	services, err := report.ListServices(ctx, client) // oldest first
	if err != nil {
		cancel()
	}
	<-ipsDone
	if err != nil {
		return nil, err
	}
	if ipErr != nil {
		return nil, ipErr
	}
	for _, svc := range services {
		v.services[report.ServiceKey(svc)] = svc
		for _, k := range addressKeys(svc) {
			v.byKey[k] = append(v.byKey[k], svc)
		}
	}
	return v, nil
}

// listRanges lists the ServiceCIDRs, and the Namespaces when some
// ServiceCIDR is scoped.
func (v *listView) listRanges(ctx context.Context, client kubernetes.Interface) error {
	cidrList, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list servicecidrs: %w", err)
	}
	cidrs := make([]*networkingv1.ServiceCIDR, len(cidrList.Items))
	for i := range cidrList.Items {
		cidrs[i] = &cidrList.Items[i]
	}
	v.ranges = newServiceCIDRs(cidrs)
	if !v.ranges.scoped {
		return nil
	}
	nsList, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list namespaces for ServiceCIDR scopes: %w", err)
	}
	v.namespaces = make(map[string]labels.Set, len(nsList.Items))
	for _, ns := range nsList.Items {
		v.namespaces[ns.Name] = ns.Labels
	}
	return nil
}

func (v *listView) keys() ([]string, error) {
	keys := make([]string, 0, len(v.byKey)+len(v.ips))
	for k := range v.byKey {
		keys = append(keys, k)
	}
	for name := range v.ips {
		if _, held := v.byKey[name]; !held {
			keys = append(keys, name)
		}
	}
	sortKeys(keys)
	return keys, nil
}

func (v *listView) holders(key string) ([]*corev1.Service, error) { return v.byKey[key], nil }

func (v *listView) ipAddress(name string) (*networkingv1.IPAddress, error) { return v.ips[name], nil }

func (v *listView) service(namespace, name string) (*corev1.Service, error) {
	return v.services[namespace+"/"+name], nil
}

func (v *listView) cidrs() (serviceCIDRs, error) { return v.ranges, nil }

func (v *listView) namespaceLabels(name string) (labels.Set, error) {
	if l, ok := v.namespaces[name]; ok {
		return l, nil
	}
	return labels.Set{corev1.LabelMetadataName: name}, nil
}

func (v *listView) counts() (int, int, error) { return len(v.services), len(v.ips), nil }

// informerView reads the shared informers' caches.
type informerView struct {
	serviceIndexer cache.Indexer
	serviceLister  corelisters.ServiceLister
	ipIndexer      cache.Indexer
	cidrLister     networkinglisters.ServiceCIDRLister
	nsLister       corelisters.NamespaceLister

	// The parsed ServiceCIDRs, rebuilt only after a ServiceCIDR event
	// (cidrsChanged): every reconcile asks for them, and with a thousand
	// ServiceCIDRs parsing them each time would be most of the repair's CPU.
	parsedCIDRs lazy.Value[serviceCIDRs]
}

// cidrsChanged makes the next cidrs() parse the ServiceCIDRs again.
func (v *informerView) cidrsChanged() { v.parsedCIDRs.Invalidate() }

// heldKeys returns the work keys of every cached Service (addressKeys), an
// address two Services hold twice.
func (v *informerView) heldKeys() []string {
	objs := v.serviceIndexer.List()
	keys := make([]string, 0, len(objs)) // about one address each
	var scratch []netip.Addr
	for _, obj := range objs {
		if svc, ok := obj.(*corev1.Service); ok {
			keys, scratch = appendAddressKeys(keys, scratch, svc)
		}
	}
	return keys
}

// heldInside returns the keys of the addresses that cached Services hold
// inside prefixes, each once: from the Services filed under the prefixes'
// holder blocks, or from every Service when the prefixes cover more blocks
// than addrindex.MaxBlocks (an IPv4 prefix shorter than /16, an IPv6 one
// shorter than /112).
func (v *informerView) heldInside(prefixes []netip.Prefix) []string {
	inside := func(k string) bool {
		ip, err := netip.ParseAddr(k)
		return err == nil && slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ip) })
	}
	var out []string
	seen := map[string]bool{} // two Services may hold one address
	blocks, ok := holderBlocks.BlockKeys(prefixes)
	if !ok {
		for _, k := range v.heldKeys() {
			if !seen[k] && inside(k) {
				seen[k] = true
				out = append(out, k)
			}
		}
		return out
	}
	for _, b := range blocks {
		objs, err := v.serviceIndexer.ByIndex(serviceIndex, b)
		if err != nil {
			continue // no such index: nothing is filed under it
		}
		for _, obj := range objs {
			svc, ok := obj.(*corev1.Service)
			if !ok {
				continue
			}
			for _, k := range addressKeys(svc) {
				if !seen[k] && inside(k) {
					seen[k] = true
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// holders reads the Services filed under key's holder block and keeps those
// holding it; the key of a ClusterIP that does not parse is filed as it is.
// A key that is neither (an IPAddress named by no address, or by an
// address in another spelling than a work key's) has no holders.
func (v *informerView) holders(key string) ([]*corev1.Service, error) {
	indexKey := key
	ip, err := netip.ParseAddr(key)
	switch {
	case err == nil && ip.String() == key:
		indexKey = holderKey(ip)
	case !strings.HasPrefix(key, invalidKeyPrefix):
		return nil, nil
	}
	objs, err := v.serviceIndexer.ByIndex(serviceIndex, indexKey)
	if err != nil {
		return nil, fmt.Errorf("cached services holding %s: %w", key, err)
	}
	var out []*corev1.Service
	for _, obj := range objs {
		if svc, ok := obj.(*corev1.Service); ok && (indexKey == key || holding.HoldsIP(svc, ip)) {
			out = append(out, svc)
		}
	}
	slices.SortFunc(out, report.OldestFirst)
	return out, nil
}

func (v *informerView) ipAddress(name string) (*networkingv1.IPAddress, error) {
	obj, exists, err := v.ipIndexer.GetByKey(name)
	if err != nil {
		return nil, fmt.Errorf("cached ipaddress %s: %w", name, err)
	}
	ipa, _ := obj.(*networkingv1.IPAddress)
	if !exists || ipa == nil {
		return nil, nil
	}
	return ipa, nil
}

func (v *informerView) service(namespace, name string) (*corev1.Service, error) {
	svc, err := v.serviceLister.Services(namespace).Get(name)
	switch {
	case err == nil: // first: apierrors.IsNotFound allocates even for nil
		return svc, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	}
	return nil, fmt.Errorf("cached service %s/%s: %w", namespace, name, err)
}

func (v *informerView) cidrs() (serviceCIDRs, error) {
	return v.parsedCIDRs.Get(func() (serviceCIDRs, error) {
		list, err := v.cidrLister.List(labels.Everything())
		if err != nil {
			return serviceCIDRs{}, fmt.Errorf("list cached servicecidrs: %w", err)
		}
		return newServiceCIDRs(list), nil
	})
}

func (v *informerView) namespaceLabels(name string) (labels.Set, error) {
	ns, err := v.nsLister.Get(name)
	switch {
	case err == nil:
		return ns.Labels, nil
	case apierrors.IsNotFound(err):
		return labels.Set{corev1.LabelMetadataName: name}, nil
	}
	return nil, fmt.Errorf("get cached namespace %s: %w", name, err)
}

// counts counts the caches' keys: a list of the objects through a lister
// would copy them into a slice grown one append at a time.
func (v *informerView) counts() (int, int, error) {
	return len(v.serviceIndexer.ListKeys()), len(v.ipIndexer.ListKeys()), nil
}
