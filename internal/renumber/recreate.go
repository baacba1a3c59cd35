package renumber

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/subrange"
)

// ErrPrimaryUnpinned is Recreate's answer when a family after the first keeps
// its address and the first is moved without a pinned address: the API
// refuses spec.clusterIPs with an empty entry before a given one.
var ErrPrimaryUnpinned = errors.New("the primary family is moved and a later one kept: the primary needs a concrete address")

// Pins are the addresses a re-create asks for in the moved families, by
// family (true: IPv6). A family without a pin is left to the server's pick.
type Pins map[bool]netip.Addr

// Recreate returns the object that re-creates c.Service: its name,
// namespace, labels, annotations, finalizers, owner references and spec,
// with each moved address replaced by its family's pin, or cleared for the
// server to pick. Kept addresses stay. What the server sets on a create
// (UID, resourceVersion, timestamps, generation, managed fields) and the
// status are left out.
func Recreate(c Candidate, pins Pins) (*corev1.Service, error) {
	svc := c.Service
	out := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            svc.Name,
			Namespace:       svc.Namespace,
			Labels:          svc.DeepCopy().Labels,
			Annotations:     svc.DeepCopy().Annotations,
			Finalizers:      svc.DeepCopy().Finalizers,
			OwnerReferences: svc.DeepCopy().OwnerReferences,
		},
		Spec: *svc.Spec.DeepCopy(),
	}
	ips, err := newClusterIPs(c, pins)
	if err != nil {
		return nil, fmt.Errorf("re-create %s: %w", c.Key(), err)
	}
	out.Spec.ClusterIPs = ips
	out.Spec.ClusterIP = ""
	if len(ips) > 0 {
		out.Spec.ClusterIP = ips[0]
	}
	return out, nil
}

// newClusterIPs is spec.clusterIPs of the re-create: the stored entries with
// moved ones pinned or dropped. Dropped entries may only end the list.
func newClusterIPs(c Candidate, pins Pins) ([]string, error) {
	stored := c.Service.Spec.ClusterIPs
	if len(stored) == 0 && c.Service.Spec.ClusterIP != "" {
		stored = []string{c.Service.Spec.ClusterIP}
	}
	var out []string
	dropped := false
	for _, text := range stored {
		ip, ok := holding.ParseClusterIP(text)
		if !ok || !containsAddr(c.Moved, ip) {
			if dropped {
				return nil, ErrPrimaryUnpinned
			}
			out = append(out, text)
			continue
		}
		pin, pinned := pins[ip.Is6()]
		if !pinned || dropped {
			dropped = true
			continue
		}
		out = append(out, pin.String())
	}
	return out, nil
}

func containsAddr(list []netip.Addr, ip netip.Addr) bool {
	for _, a := range list {
		if a == ip {
			return true
		}
	}
	return false
}

// NeedsPrimaryPin reports whether c's re-create must name its primary
// family's new address: the primary is moved and a later family is kept.
func NeedsPrimaryPin(c Candidate) bool {
	ips := holding.IPs(c.Service)
	return len(ips) > 1 && containsAddr(c.Moved, ips[0]) && len(c.Kept) > 0
}

// MovedFamilies returns the IP families of c's moved addresses, in the order
// of the Service's spec.
func MovedFamilies(c Candidate) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, ip := range holding.IPs(c.Service) {
		if containsAddr(c.Moved, ip) {
			out = append(out, corev1.IPFamily(subrange.FamilyName(ip.Is6())))
		}
	}
	return out
}

// ProbeName is the generateName of the dry-run probes.
const ProbeName = "renumber-probe-"

// Probe returns the Service whose server-side dry-run create checks that a
// re-create of c can get addresses in its moved families and names the
// server's picks: c's namespace, labels (scopes select on them),
// annotations and spec, asking only for the moved families, with pins as
// static requests, under a generated name. Node ports are left to the
// server: a dry run refuses the ones c still holds.
func Probe(c Candidate, pins Pins) *corev1.Service {
	svc := c.Service
	p := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ProbeName, Namespace: svc.Namespace, Labels: svc.Labels, Annotations: svc.Annotations},
		Spec:       *svc.Spec.DeepCopy(),
	}
	families := MovedFamilies(c)
	p.Spec.IPFamilies = families
	if len(families) == 1 {
		single := corev1.IPFamilyPolicySingleStack
		p.Spec.IPFamilyPolicy = &single
	}
	p.Spec.ClusterIP, p.Spec.ClusterIPs = "", nil
	for _, f := range families {
		pin, ok := pins[f == corev1.IPv6Protocol]
		if !ok {
			break
		}
		p.Spec.ClusterIPs = append(p.Spec.ClusterIPs, pin.String())
	}
	if len(p.Spec.ClusterIPs) > 0 {
		p.Spec.ClusterIP = p.Spec.ClusterIPs[0]
	}
	for i := range p.Spec.Ports {
		p.Spec.Ports[i].NodePort = 0
	}
	p.Spec.HealthCheckNodePort = 0
	return p
}

// WithoutKept returns rec with the addresses and node ports it keeps from
// the old Service cleared, for a create whose kept values were taken while
// the Service was gone; pins (the moved families') stay.
func WithoutKept(c Candidate, rec *corev1.Service) *corev1.Service {
	out := rec.DeepCopy()
	var ips []string
	for _, text := range out.Spec.ClusterIPs {
		ip, ok := holding.ParseClusterIP(text)
		if !ok || containsAddr(c.Kept, ip) {
			break
		}
		ips = append(ips, text)
	}
	out.Spec.ClusterIPs, out.Spec.ClusterIP = ips, ""
	if len(ips) > 0 {
		out.Spec.ClusterIP = ips[0]
	}
	for i := range out.Spec.Ports {
		out.Spec.Ports[i].NodePort = 0
	}
	out.Spec.HealthCheckNodePort = 0
	return out
}

// KeptChanges lists what a re-create was meant to keep from old and did not:
// each node port and the health-check node port old held that created
// holds no longer, and each kept address (c.Kept) created lacks. A
// re-create keeps them all unless one was taken while the Service was gone;
// the list says which, so that the run reports the change instead of making
// it silently.
func KeptChanges(c Candidate, created *corev1.Service) []string {
	old := c.Service
	var changes []string
	for _, op := range old.Spec.Ports {
		if op.NodePort == 0 {
			continue
		}
		now := int32(0)
		for _, np := range created.Spec.Ports {
			if np.Port == op.Port && np.Protocol == op.Protocol {
				now = np.NodePort
				break
			}
		}
		if now != op.NodePort {
			changes = append(changes, fmt.Sprintf("node port %d of port %d/%s is now %s", op.NodePort, op.Port, op.Protocol, portText(now)))
		}
	}
	if hc := old.Spec.HealthCheckNodePort; hc != 0 && created.Spec.HealthCheckNodePort != hc {
		changes = append(changes, fmt.Sprintf("health-check node port %d is now %s", hc, portText(created.Spec.HealthCheckNodePort)))
	}
	held := holding.IPs(created)
	for _, ip := range c.Kept {
		if containsAddr(held, ip) {
			continue
		}
		now := "gone"
		for _, h := range held {
			if h.Is6() == ip.Is6() {
				now = h.String()
			}
		}
		changes = append(changes, fmt.Sprintf("kept address %s is now %s", ip, now))
	}
	return changes
}

func portText(p int32) string {
	if p == 0 {
		return "none"
	}
	return fmt.Sprint(p)
}
