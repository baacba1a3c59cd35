package iprepair

import (
	"context"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair"
)

// BenchmarkFullPass measures one full pass of the server's IPAddress repair
// over its caches: 200,000 Services shaped like hack/scale.sh's, each
// address with its IPAddress, nothing to repair.
//
//	go test ./pkg/repair/iprepair -run '^$' -bench BenchmarkFullPass -benchmem
func BenchmarkFullPass(b *testing.B) {
	const n = 200_000
	services := cache.NewIndexer(cache.MetaNamespaceKeyFunc, serviceIndexers)
	ips := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	cidrs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, svc := range benchServices(n + 1)[1:] { // the first holds fd00::, which no range serves
		svc.UID = types.UID("uid-" + svc.Name)
		if err := services.Add(svc); err != nil {
			b.Fatal(err)
		}
		ipa := ipaddress.NewObject(netip.MustParseAddr(svc.Spec.ClusterIP),
			allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)})
		if err := ips.Add(ipa); err != nil {
			b.Fatal(err)
		}
	}
	for name, cidr := range map[string]string{"kubernetes": "10.96.0.0/12", "v6": "fd00::/112"} {
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}
		if err := cidrs.Add(sc); err != nil {
			b.Fatal(err)
		}
	}
	view := &informerView{
		serviceIndexer: services,
		serviceLister:  corelisters.NewServiceLister(services),
		ipIndexer:      ips,
		cidrLister:     networkinglisters.NewServiceCIDRLister(cidrs),
		nsLister:       corelisters.NewNamespaceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})),
	}
	r, err := NewIPAddressRepair(IPAddressConfig{Options: repair.Options{Client: fake.NewClientset(), DryRun: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rep, err := r.pass(context.Background(), view)
		if err != nil || len(rep.Problems) != 0 || rep.Services != n {
			b.Fatalf("pass: %v, %v", rep, err)
		}
	}
}

// BenchmarkCarryOverCheck measures what MigrateToIPAddress (allocator
// migrate) does when nothing is missing: every address of 200,000 Services
// looked up among their IPAddresses, each found its owner's.
//
//	go test ./pkg/repair/iprepair -run '^$' -bench BenchmarkCarryOverCheck -benchmem
func BenchmarkCarryOverCheck(b *testing.B) {
	services := benchServices(200_000)
	ips := map[string]*networkingv1.IPAddress{}
	for _, svc := range services {
		svc.UID = types.UID("uid-" + svc.Name)
		ips[svc.Spec.ClusterIP] = ipaddress.NewObject(netip.MustParseAddr(svc.Spec.ClusterIP),
			allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)})
	}
	existing := func(name string) *networkingv1.IPAddress { return ips[name] }
	b.ReportAllocs()
	for b.Loop() {
		rep := &MigrationReport{}
		claims, _ := serviceClaims(services)
		if missing := missingClaims(rep, claims, existing); len(missing) != 0 || rep.Present != len(services) {
			b.Fatalf("%d missing, %d present", len(missing), rep.Present)
		}
	}
}
