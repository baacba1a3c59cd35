package servicealloc

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/pkg/subrange"
)

// FuzzCreate feeds arbitrary IP fields through PrepareCreate and
// AllocateCreate on a dual-stack allocator. It must never panic, and an
// accepted Service must be consistent: clusterIP = clusterIPs[0], one IP
// per family in ipFamilies order, and every IP reserved. A non-canonical
// IPv6 spelling ("FD00:10::16") is accepted and stored as written, as
// kube-apiserver does (testdata/parity/v6.json records its warning); the
// address it names is what must be reserved.
func FuzzCreate(f *testing.F) {
	f.Add("", "", "", "", "")
	f.Add("10.0.0.5", "", "IPv4", "", "SingleStack")
	f.Add("fd00::5", "10.0.0.7", "IPv6", "IPv4", "RequireDualStack")
	f.Add("None", "", "", "", "PreferDualStack")
	f.Add("::ffff:10.0.0.1", "010.0.0.1", "IPv5", "IPv4", "Bogus")
	f.Add("fd00::A", "", "IPv6", "", "")
	f.Add("fd00::5%eth0", "", "IPv6", "", "")
	f.Fuzz(func(t *testing.T, ip0, ip1, fam0, fam1, policy string) {
		ctx := context.Background()
		a, mems := newAlloc(t, "10.0.0.0/24", "fd00::/120")
		s := svc(func(s *corev1.Service) {
			s.Spec.ClusterIP = ip0
			for _, ip := range []string{ip0, ip1} {
				if ip != "" {
					s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, ip)
				}
			}
			for _, fam := range []string{fam0, fam1} {
				if fam != "" {
					s.Spec.IPFamilies = append(s.Spec.IPFamilies, corev1.IPFamily(fam))
				}
			}
			if policy != "" {
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicy(policy))
			}
		})
		if err := a.PrepareCreate(context.Background(), s); err != nil {
			return
		}
		txn, err := a.AllocateCreate(ctx, s, false)
		if err != nil {
			if n := len(mems[0].used) + len(mems[1].used); n != 0 {
				t.Fatalf("failed create left %d reservations", n)
			}
			return
		}
		defer txn.Revert(ctx)
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			return
		}
		if len(s.Spec.ClusterIPs) != len(s.Spec.IPFamilies) || s.Spec.ClusterIPs[0] != s.Spec.ClusterIP {
			t.Fatalf("inconsistent: clusterIP %q clusterIPs %q families %v", s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies)
		}
		for i, text := range s.Spec.ClusterIPs {
			addr, err := netip.ParseAddr(text)
			if err != nil || addr.Is4In6() || addr.Zone() != "" {
				t.Fatalf("accepted invalid IP %q", text)
			}
			if corev1.IPFamily(subrange.FamilyName(addr.Is6())) != s.Spec.IPFamilies[i] {
				t.Fatalf("IP %s does not match family %s", text, s.Spec.IPFamilies[i])
			}
			m := mems[0]
			if addr.Is6() {
				m = mems[1]
			}
			if !m.used[addr] {
				t.Fatalf("IP %s not reserved", text)
			}
		}
		if strings.Contains(strings.Join(s.Spec.ClusterIPs, ","), "None") {
			t.Fatalf("None mixed with IPs: %v", s.Spec.ClusterIPs)
		}
	})
}
