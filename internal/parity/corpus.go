package parity

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Family is one configuration of the server's service ranges.
type Family struct {
	// Name is the file name of its record: v4, v6, v4v6 or v6v4.
	Name string
	// ServiceRange is --service-cluster-ip-range.
	ServiceRange string
}

// The ranges: static picks of the corpus are low offsets, in the lower
// (static) band of each range, where no dynamic pick lands.
const (
	rangeV4 = "10.0.0.0/16"
	rangeV6 = "fd00:10::/108"
)

// Families are the configurations every record is captured and replayed in.
var Families = []Family{
	{Name: "v4", ServiceRange: rangeV4},
	{Name: "v6", ServiceRange: rangeV6},
	{Name: "v4v6", ServiceRange: rangeV4 + "," + rangeV6},
	{Name: "v6v4", ServiceRange: rangeV6 + "," + rangeV4},
}

// FamilyNamed returns the configuration called name.
func FamilyNamed(name string) (Family, error) {
	for _, f := range Families {
		if f.Name == name {
			return f, nil
		}
	}
	return Family{}, fmt.Errorf("unknown family configuration %q (want v4, v6, v4v6 or v6v4)", name)
}

// primary is the family of the first range.
func (f Family) primary() corev1.IPFamily {
	if strings.HasPrefix(f.Name, "v6") {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// other is the family the first range is not.
func (f Family) other() corev1.IPFamily {
	if f.primary() == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// ip returns the static address at offset n of family fam's range (even
// when the server has no range of that family: the answer is the test).
func ip(fam corev1.IPFamily, n int) string {
	if fam == corev1.IPv6Protocol {
		return fmt.Sprintf("fd00:10::%x", n)
	}
	return fmt.Sprintf("10.0.0.%d", n)
}

// pri and sec are static addresses of the primary and the other family.
func (f Family) pri(n int) string { return ip(f.primary(), n) }
func (f Family) sec(n int) string { return ip(f.other(), n) }

// Corpus returns every case, in a stable order, for family configuration f.
func Corpus(f Family) []Case {
	var cs []Case
	for _, part := range []func(Family) []Case{
		itemCases, createMatrix, clusterIPCases, updateCases, nodePortCases,
		validationCases, patchCases, dryRunCases, serviceCIDRCases,
	} {
		cs = append(cs, part(f)...)
	}
	return cs
}

// Requests counts the requests the cases send (an update's GET not included).
func Requests(cs []Case) int {
	n := 0
	for _, c := range cs {
		n += len(c.Steps)
	}
	return n
}

// ---- Services ----

type opt func(*corev1.Service)

// svc is a minimal valid ClusterIP Service as a user writes it: a selector
// and one port, every defaulted field left out.
func svc(name string, opts ...opt) *corev1.Service {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func finalizer(f string) opt {
	return func(s *corev1.Service) { s.Finalizers = append(s.Finalizers, f) }
}

func typ(t corev1.ServiceType) opt { return func(s *corev1.Service) { s.Spec.Type = t } }

func policy(p corev1.IPFamilyPolicy) opt {
	return func(s *corev1.Service) {
		if p != "" {
			s.Spec.IPFamilyPolicy = &p
		}
	}
}

func families(fs ...corev1.IPFamily) opt {
	return func(s *corev1.Service) { s.Spec.IPFamilies = fs }
}

// ips sets clusterIPs and clusterIP as a client that writes both does.
func ips(v ...string) opt {
	return func(s *corev1.Service) {
		s.Spec.ClusterIPs = v
		if len(v) > 0 {
			s.Spec.ClusterIP = v[0]
		}
	}
}

func clusterIP(v string) opt { return func(s *corev1.Service) { s.Spec.ClusterIP = v } }

func headless() opt { return clusterIP(corev1.ClusterIPNone) }

func noSelector() opt { return func(s *corev1.Service) { s.Spec.Selector = nil } }

func ports(p ...corev1.ServicePort) opt { return func(s *corev1.Service) { s.Spec.Ports = p } }

func tcpPort(name string, port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP, NodePort: nodePort}
}

func udpPort(name string, port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolUDP, NodePort: nodePort}
}

func local() opt {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
}

func hcnp(p int32) opt { return func(s *corev1.Service) { s.Spec.HealthCheckNodePort = p } }

func allocateLB(v bool) opt {
	return func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = &v }
}

func externalName(n string) opt {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = n
		s.Spec.Selector = nil
	}
}

func annotate(k, v string) opt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func with(f func(*corev1.ServiceSpec)) opt { return func(s *corev1.Service) { f(&s.Spec) } }

func targetPort(v intstr.IntOrString) opt {
	return func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = v }
}

// ---- steps ----

func create(s *corev1.Service) Step {
	return Step{Op: OpCreate, Kind: KindService, Name: s.Name, Service: s}
}

func createDry(s *corev1.Service) Step {
	st := create(s)
	st.DryRun = true
	return st
}

func update(name string, m func(*corev1.Service)) Step {
	return Step{Op: OpUpdate, Kind: KindService, Name: name, Mutate: m}
}

func updateDry(name string, m func(*corev1.Service)) Step {
	st := update(name, m)
	st.DryRun = true
	return st
}

func updateStatus(name string, m func(*corev1.Service)) Step {
	return Step{Op: OpUpdateStatus, Kind: KindService, Name: name, Mutate: m}
}

func patch(name string, pt types.PatchType, body string) Step {
	return Step{Op: OpPatch, Kind: KindService, Name: name, Patch: body, PatchType: pt}
}

func patchStatus(name string, pt types.PatchType, body string) Step {
	return Step{Op: OpPatchStatus, Kind: KindService, Name: name, Patch: body, PatchType: pt}
}

func del(name string) Step { return Step{Op: OpDelete, Kind: KindService, Name: name} }

func delDry(name string) Step {
	return Step{Op: OpDelete, Kind: KindService, Name: name, DryRun: true}
}

func get(name string) Step { return Step{Op: OpGet, Kind: KindService, Name: name} }

// ---- ServiceCIDRs ----

func cidr(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
}

func createCIDR(c *networkingv1.ServiceCIDR) Step {
	return Step{Op: OpCreate, Kind: KindServiceCIDR, Name: c.Name, CIDR: c}
}

func updateCIDR(name string, m func(*networkingv1.ServiceCIDR)) Step {
	return Step{Op: OpUpdate, Kind: KindServiceCIDR, Name: name, MutateCIDR: m}
}

func delCIDR(name string) Step { return Step{Op: OpDelete, Kind: KindServiceCIDR, Name: name} }

func getCIDR(name string) Step { return Step{Op: OpGet, Kind: KindServiceCIDR, Name: name} }

func patchCIDR(name string, pt types.PatchType, body string) Step {
	return Step{Op: OpPatch, Kind: KindServiceCIDR, Name: name, Patch: body, PatchType: pt}
}

func steps(s ...Step) []Step { return s }
