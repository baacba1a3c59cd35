package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

func newService(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	return svc
}

func withIP(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ClusterIP = ips[0]
		s.Spec.ClusterIPs = ips
	}
}

func withPolicy(p corev1.IPFamilyPolicy) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &p }
}

func withFamilies(f ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilies = f }
}

func create(ctx context.Context, c kubernetes.Interface, svc *corev1.Service) (*corev1.Service, error) {
	return c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
}

func mustCreate(t *testing.T, ctx context.Context, c kubernetes.Interface, svc *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := create(ctx, c, svc)
	if err != nil {
		t.Fatalf("create %s: %v", svc.Name, err)
	}
	return out
}

func mustDelete(t *testing.T, ctx context.Context, c kubernetes.Interface, name string) {
	t.Helper()
	if err := c.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// expectStatus checks err is an API error with code and a message containing want.
func expectStatus(t *testing.T, err error, code int32, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want HTTP %d %q, got success", code, want)
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		t.Fatalf("want HTTP %d, got non-API error %v", code, err)
	}
	if got := status.Status().Code; got != code {
		t.Fatalf("want HTTP %d, got %d: %v", code, got, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("want message containing %q, got %q", want, err.Error())
	}
}

// expectFree checks ip is free by taking it with a static create, then gives it back.
func expectFree(t *testing.T, ctx context.Context, c kubernetes.Interface, ip string) {
	t.Helper()
	name := "probe-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip)
	mustCreate(t, ctx, c, newService(name, withIP(ip)))
	mustDelete(t, ctx, c, name)
}

// expectTaken checks a static create of ip fails with "already allocated".
func expectTaken(t *testing.T, ctx context.Context, c kubernetes.Interface, ip string) {
	t.Helper()
	_, err := create(ctx, c, newService("probe-taken", withIP(ip)))
	expectStatus(t, err, 422, "provided IP is already allocated")
}

func TestSingleStack(t *testing.T) {
	t.Parallel()
	forEachModel(t, testSingleStack)
}

func testSingleStack(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.96.0.0/16"})
	c := s.client
	ctx := testContext(t)
	// The static band is offset 256: 10.96.0.1 … 10.96.1.0 (half of a /23,
	// so the /23 itself is no test: 10.96.1.1 … 10.96.1.255 are dynamic).
	lastStatic := netip.MustParseAddr("10.96.1.0")

	t.Run("kubernetes service gets network+1", func(t *testing.T) {
		svc, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP != "10.96.0.1" {
			t.Fatalf("kubernetes service: %v %v", svc.Spec.ClusterIPs, err)
		}
		for _, ns := range []string{"default", "kube-system"} {
			if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				t.Errorf("namespace %s: %v", ns, err)
			}
		}
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil || strings.Join(sc.Spec.CIDRs, ",") != "10.96.0.0/16" {
			t.Fatalf("default ServiceCIDR: %v %v", sc, err)
		}
	})

	t.Run("dynamic", func(t *testing.T) {
		svc := mustCreate(t, ctx, c, newService("dyn"))
		ip := netip.MustParseAddr(svc.Spec.ClusterIP)
		if !netip.MustParsePrefix("10.96.0.0/16").Contains(ip) || ip.Compare(lastStatic) <= 0 {
			t.Errorf("dynamic IP %s not in the upper band", ip)
		}
		if len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
			t.Errorf("clusterIPs %v", svc.Spec.ClusterIPs)
		}
		if *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack || len(svc.Spec.IPFamilies) != 1 || svc.Spec.IPFamilies[0] != corev1.IPv4Protocol {
			t.Errorf("families %v policy %v", svc.Spec.IPFamilies, *svc.Spec.IPFamilyPolicy)
		}
		if model == "ipaddress" {
			ipa, err := c.NetworkingV1().IPAddresses().Get(ctx, svc.Spec.ClusterIP, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("IPAddress of dyn: %v", err)
			}
			if ref := ipa.Spec.ParentRef; ref == nil || ref.Resource != "services" || ref.Namespace != "default" || ref.Name != "dyn" {
				t.Errorf("IPAddress parentRef %+v", ipa.Spec.ParentRef)
			}
		}
		expectTaken(t, ctx, c, svc.Spec.ClusterIP)
		mustDelete(t, ctx, c, "dyn")
		expectFree(t, ctx, c, svc.Spec.ClusterIP)
	})

	t.Run("static lower band and duplicate", func(t *testing.T) {
		svc := mustCreate(t, ctx, c, newService("static", withIP("10.96.0.10")))
		if svc.Spec.ClusterIP != "10.96.0.10" {
			t.Fatalf("got %s", svc.Spec.ClusterIP)
		}
		_, err := create(ctx, c, newService("static2", withIP("10.96.0.10")))
		expectStatus(t, err, 422, "failed to allocate IP 10.96.0.10: provided IP is already allocated")
		if !strings.Contains(err.Error(), "spec.clusterIPs") {
			t.Errorf("error does not name spec.clusterIPs: %v", err)
		}
		mustDelete(t, ctx, c, "static")
	})

	t.Run("out of range", func(t *testing.T) {
		_, err := create(ctx, c, newService("outside", withIP("10.97.0.5")))
		expectStatus(t, err, 422, "failed to allocate IP 10.97.0.5")
	})

	t.Run("headless and ExternalName allocate nothing", func(t *testing.T) {
		h := mustCreate(t, ctx, c, newService("headless", withIP("None")))
		if h.Spec.ClusterIP != "None" || len(h.Spec.ClusterIPs) != 1 {
			t.Errorf("headless: %v", h.Spec.ClusterIPs)
		}
		en := mustCreate(t, ctx, c, newService("ext", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.com"
			s.Spec.Selector = nil
		}))
		if en.Spec.ClusterIP != "" || len(en.Spec.ClusterIPs) != 0 || en.Spec.IPFamilyPolicy != nil {
			t.Errorf("ExternalName got IP fields: %+v", en.Spec)
		}
		_, err := create(ctx, c, newService("ext-ip", withIP("10.96.0.20"), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.com"
		}))
		expectStatus(t, err, 422, "may not be set for ExternalName services")
		expectFree(t, ctx, c, "10.96.0.20")
		mustDelete(t, ctx, c, "headless")
		mustDelete(t, ctx, c, "ext")
	})

	t.Run("dual-stack requests on a single-stack cluster", func(t *testing.T) {
		_, err := create(ctx, c, newService("req-dual", withPolicy(corev1.IPFamilyPolicyRequireDualStack)))
		expectStatus(t, err, 422, "this cluster is not configured for dual-stack services")
		_, err = create(ctx, c, newService("v6", withFamilies(corev1.IPv6Protocol)))
		expectStatus(t, err, 422, "not configured on this cluster")
		_, err = create(ctx, c, newService("v6ip", withIP("fd00::10")))
		expectStatus(t, err, 422, "IPv6 is not configured on this cluster")
		_, err = create(ctx, c, newService("two-v4", withIP("10.96.0.30", "10.96.0.31"), withPolicy(corev1.IPFamilyPolicyPreferDualStack)))
		expectStatus(t, err, 422, "")
		pref := mustCreate(t, ctx, c, newService("prefer", withPolicy(corev1.IPFamilyPolicyPreferDualStack)))
		if len(pref.Spec.ClusterIPs) != 1 || len(pref.Spec.IPFamilies) != 1 {
			t.Errorf("PreferDualStack on single-stack: %v %v", pref.Spec.ClusterIPs, pref.Spec.IPFamilies)
		}
		mustDelete(t, ctx, c, "prefer")
	})

	t.Run("node ports are allocated and released with the IP", func(t *testing.T) {
		for _, typ := range []corev1.ServiceType{corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
			name := "np-" + strings.ToLower(string(typ))
			svc := mustCreate(t, ctx, c, newService(name, withIP("10.96.0.40"), func(s *corev1.Service) { s.Spec.Type = typ }))
			if svc.Spec.Ports[0].NodePort == 0 {
				t.Errorf("%s got no nodePort", typ)
			}
			mustDelete(t, ctx, c, name)
		}
		expectFree(t, ctx, c, "10.96.0.40")
	})

	t.Run("update rules", func(t *testing.T) {
		svc := mustCreate(t, ctx, c, newService("upd", withIP("10.96.0.50")))
		changed := svc.DeepCopy()
		changed.Spec.ClusterIP, changed.Spec.ClusterIPs = "10.96.0.51", []string{"10.96.0.51"}
		_, err := c.CoreV1().Services("default").Update(ctx, changed, metav1.UpdateOptions{})
		expectStatus(t, err, 422, "may not change once set")
		expectFree(t, ctx, c, "10.96.0.51")

		// An update that leaves the IP fields out keeps them.
		kept := svc.DeepCopy()
		kept.Spec.ClusterIP, kept.Spec.ClusterIPs, kept.Spec.IPFamilies = "", nil, nil
		kept.Labels = map[string]string{"x": "y"}
		got, err := c.CoreV1().Services("default").Update(ctx, kept, metav1.UpdateOptions{})
		if err != nil || got.Spec.ClusterIP != "10.96.0.50" {
			t.Fatalf("update without IP: %v %v", got, err)
		}

		// A replace with a fresh object (no uid, creationTimestamp or
		// resourceVersion, as kubectl replace of a manifest) keeps the IP.
		fresh := newService("upd")
		got, err = c.CoreV1().Services("default").Update(ctx, fresh, metav1.UpdateOptions{})
		if err != nil || got.Spec.ClusterIP != "10.96.0.50" || got.UID != svc.UID {
			t.Fatalf("replace without system fields: %v %v", got, err)
		}

		// type → ExternalName releases on success.
		ext := got.DeepCopy()
		ext.Spec.Type = corev1.ServiceTypeExternalName
		ext.Spec.ExternalName = "example.org"
		got, err = c.CoreV1().Services("default").Update(ctx, ext, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("to ExternalName: %v", err)
		}
		if got.Spec.ClusterIP != "" || len(got.Spec.ClusterIPs) != 0 {
			t.Errorf("ExternalName kept %v", got.Spec.ClusterIPs)
		}
		expectFree(t, ctx, c, "10.96.0.50")

		// And back to ClusterIP allocates again.
		back := got.DeepCopy()
		back.Spec.Type = corev1.ServiceTypeClusterIP
		back.Spec.ExternalName = ""
		got, err = c.CoreV1().Services("default").Update(ctx, back, metav1.UpdateOptions{})
		if err != nil || got.Spec.ClusterIP == "" {
			t.Fatalf("back to ClusterIP: %v %v", got, err)
		}
		expectTaken(t, ctx, c, got.Spec.ClusterIP)
		mustDelete(t, ctx, c, "upd")
		expectFree(t, ctx, c, got.Spec.ClusterIP)
	})

	t.Run("delete finished by removing a finalizer releases", func(t *testing.T) {
		mustCreate(t, ctx, c, newService("fin", withIP("10.96.0.55"), func(s *corev1.Service) {
			s.Finalizers = []string{"example.com/hold"}
		}))
		mustDelete(t, ctx, c, "fin")
		held, err := c.CoreV1().Services("default").Get(ctx, "fin", metav1.GetOptions{})
		if err != nil || held.DeletionTimestamp == nil {
			t.Fatalf("held by finalizer: %v %v", held, err)
		}
		expectTaken(t, ctx, c, "10.96.0.55")
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := c.CoreV1().Services("default").Patch(ctx, "fin", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("remove finalizer: %v", err)
		}
		if _, err := c.CoreV1().Services("default").Get(ctx, "fin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("still there: %v", err)
		}
		expectFree(t, ctx, c, "10.96.0.55")
	})

	t.Run("dry-run reserves nothing", func(t *testing.T) {
		svc, err := c.CoreV1().Services("default").Create(ctx, newService("dry", withIP("10.96.0.60")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || svc.Spec.ClusterIP != "10.96.0.60" {
			t.Fatalf("dry-run create: %v %v", svc, err)
		}
		dyn, err := c.CoreV1().Services("default").Create(ctx, newService("dry-dyn"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || dyn.Spec.ClusterIP == "" {
			t.Fatalf("dry-run dynamic create: %v %v", dyn, err)
		}
		expectFree(t, ctx, c, "10.96.0.60")
		expectFree(t, ctx, c, dyn.Spec.ClusterIP)
		if _, err := c.CoreV1().Services("default").Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run stored the Service: %v", err)
		}
		// Dry-run still reports conflicts.
		mustCreate(t, ctx, c, newService("dry-owner", withIP("10.96.0.61")))
		_, err = c.CoreV1().Services("default").Create(ctx, newService("dry2", withIP("10.96.0.61")), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		expectStatus(t, err, 422, "provided IP is already allocated")
		// Dry-run delete keeps the IP.
		if err := c.CoreV1().Services("default").Delete(ctx, "dry-owner", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		expectTaken(t, ctx, c, "10.96.0.61")
		mustDelete(t, ctx, c, "dry-owner")
	})

	t.Run("failed creates leak nothing", func(t *testing.T) {
		_, err := c.CoreV1().Services("missing-ns").Create(ctx, newService("x", withIP("10.96.0.70")), metav1.CreateOptions{})
		expectStatus(t, err, 404, `namespaces "missing-ns" not found`)
		_, err = create(ctx, c, newService("bad-port", withIP("10.96.0.70"), func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }))
		expectStatus(t, err, 422, "must be between 1 and 65535")
		_, err = create(ctx, c, newService("Bad_Name", withIP("10.96.0.70")))
		expectStatus(t, err, 422, "metadata.name")
		expectFree(t, ctx, c, "10.96.0.70")
	})

	t.Run("re-POST of an existing Service reserves nothing", func(t *testing.T) {
		mustCreate(t, ctx, c, newService("exists"))
		_, err := create(ctx, c, newService("exists", withIP("10.96.0.80")))
		expectStatus(t, err, 409, "already exists")
		expectFree(t, ctx, c, "10.96.0.80")
		mustDelete(t, ctx, c, "exists")
	})

	t.Run("server-side apply creates and updates", func(t *testing.T) {
		apply := corev1apply.Service("applied", "default").
			WithSpec(corev1apply.ServiceSpec().
				WithSelector(map[string]string{"app": "applied"}).
				WithPorts(corev1apply.ServicePort().WithPort(80).WithProtocol(corev1.ProtocolTCP)))
		got, err := c.CoreV1().Services("default").Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "test", Force: true})
		if err != nil || got.Spec.ClusterIP == "" {
			t.Fatalf("apply create: %v %v", got, err)
		}
		ip := got.Spec.ClusterIP
		apply.WithLabels(map[string]string{"team": "a"})
		got, err = c.CoreV1().Services("default").Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "test", Force: true})
		if err != nil || got.Spec.ClusterIP != ip || got.Labels["team"] != "a" {
			t.Fatalf("apply update: %v %v", got, err)
		}
		expectTaken(t, ctx, c, ip)
		mustDelete(t, ctx, c, "applied")
		expectFree(t, ctx, c, ip)
	})

	t.Run("field selectors", func(t *testing.T) {
		mustCreate(t, ctx, c, newService("sel", withIP("10.96.0.90")))
		list, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{FieldSelector: "spec.clusterIP=10.96.0.90"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "sel" {
			t.Fatalf("field selector: %v %v", list, err)
		}
		list, err = c.CoreV1().Services("").List(ctx, metav1.ListOptions{FieldSelector: "spec.type=ExternalName"})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("spec.type selector: %v %v", list, err)
		}
		mustDelete(t, ctx, c, "sel")
	})

	t.Run("stored like kube-apiserver", func(t *testing.T) {
		mustCreate(t, ctx, c, newService("stored", withIP("10.96.0.91")))
		resp, err := s.etcd.Client().Get(ctx, "/registry/services/specs/default/stored")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("etcd get: %v %v", resp, err)
		}
		if v := resp.Kvs[0].Value; !bytes.HasPrefix(v, []byte("k8s\x00")) || !bytes.Contains(v, []byte("10.96.0.91")) {
			t.Errorf("stored value is not the protobuf envelope: %q", v[:min(len(v), 40)])
		}
		obj, err := etcdlayout.Decode(resp.Kvs[0].Value)
		if err != nil {
			t.Fatalf("decode as kube-apiserver data: %v", err)
		}
		if stored, ok := obj.(*corev1.Service); !ok || stored.Spec.ClusterIP != "10.96.0.91" || stored.Namespace != "default" {
			t.Errorf("decoded %T %+v", obj, obj)
		}
		if model == "ipaddress" {
			resp, err := s.etcd.Client().Get(ctx, "/registry/ipaddresses/10.96.0.91")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("IPAddress key: %v %v", resp, err)
			}
			obj, err := etcdlayout.Decode(resp.Kvs[0].Value)
			ipa, ok := obj.(*networkingv1.IPAddress)
			if err != nil || !ok || ipa.Labels["ipaddress.kubernetes.io/managed-by"] != "ipallocator.k8s.io" {
				t.Errorf("stored IPAddress %+v %v", obj, err)
			}
		}
		for _, key := range []string{"/registry/namespaces/default", "/registry/servicecidrs/kubernetes"} {
			resp, err := s.etcd.Client().Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 || !bytes.HasPrefix(resp.Kvs[0].Value, []byte("k8s\x00")) {
				t.Errorf("%s: %v %v", key, resp, err)
			}
		}
		mustDelete(t, ctx, c, "stored")
	})

	t.Run("bad input is a 4xx and the server stays healthy", func(t *testing.T) {
		for _, ip := range []string{"10.96.0.256", "010.96.0.5", "::ffff:10.96.0.5", "10.96.0.5/32", "fd00::0010", "banana"} {
			_, err := create(ctx, c, newService("bad-ip", withIP(ip)))
			expectStatus(t, err, 422, "spec.clusterIPs")
		}
		_, err := create(ctx, c, newService(strings.Repeat("a", 64)))
		expectStatus(t, err, 422, "metadata.name")
		for _, cidr := range []string{"10.100.0.1/24", "10.100.0.0/33", "::ffff:10.100.0.0/120", "010.100.0.0/24"} {
			_, err = c.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
				ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}, metav1.CreateOptions{})
			expectStatus(t, err, 422, "spec.cidrs")
		}
		for _, name := range []string{"10.96.0.300", "010.96.0.1", "::ffff:10.96.0.1", "FD00::1"} {
			_, err = c.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "x"}},
			}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Errorf("IPAddress %q: want 4xx, got %v", name, err)
			}
		}
		// Wrong types in the body.
		body := []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"wrong"},"spec":{"ports":[{"port":"eighty"}]}}`)
		res := c.CoreV1().RESTClient().Post().Namespace("default").Resource("services").Body(body).SetHeader("Content-Type", "application/json").Do(ctx)
		var code int
		res.StatusCode(&code)
		if code < 400 || code >= 500 {
			t.Errorf("wrong types: HTTP %d, %v", code, res.Error())
		}
		body = []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"wrong"},"spec":{"clusterIPs":"10.96.0.5"}}`)
		res = c.CoreV1().RESTClient().Post().Namespace("default").Resource("services").Body(body).SetHeader("Content-Type", "application/json").Do(ctx)
		res.StatusCode(&code)
		if code < 400 || code >= 500 {
			t.Errorf("wrong types: HTTP %d, %v", code, res.Error())
		}
		waitReady(t, c)
	})

	t.Run("deleting a namespace deletes its Services and releases their IPs", func(t *testing.T) {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tmp"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Services("tmp").Create(ctx, newService("gone", withIP("10.96.0.95")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Namespaces().Delete(ctx, "tmp", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := c.CoreV1().Services("tmp").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("Services left in the deleted namespace: %v %v", list, err)
		}
		expectFree(t, ctx, c, "10.96.0.95")
	})

	t.Run("system namespaces may not be deleted", func(t *testing.T) {
		err := c.CoreV1().Namespaces().Delete(ctx, "kube-system", metav1.DeleteOptions{})
		expectStatus(t, err, 403, "this namespace may not be deleted")
	})

	t.Run("anonymous requests are refused", func(t *testing.T) {
		anon := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
		resp, err := anon.Get(s.restConfig.Host + "/api/v1/services")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous: HTTP %d", resp.StatusCode)
		}
	})

	t.Run("ipaddresses and servicecidrs are served", func(t *testing.T) {
		ip, err := c.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: "10.96.5.5"},
			Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "x"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip.Spec.ParentRef.Name = "y"
		_, err = c.NetworkingV1().IPAddresses().Update(ctx, ip, metav1.UpdateOptions{})
		expectStatus(t, err, 422, "immutable")
		if err := c.NetworkingV1().IPAddresses().Delete(ctx, "10.96.5.5", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Test","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
		if _, err := c.NetworkingV1().ServiceCIDRs().Patch(ctx, "kubernetes", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("status patch: %v", err)
		}
	})
}

func TestRangeFull(t *testing.T) {
	t.Parallel()
	forEachModel(t, testRangeFull)
}

func testRangeFull(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/27"})
	c := s.client
	ctx := testContext(t)
	// 30 usable addresses, one taken by the kubernetes Service.
	seen := map[string]bool{"10.0.0.1": true}
	for i := 0; i < 29; i++ {
		svc := mustCreate(t, ctx, c, newService(fmt.Sprintf("fill-%02d", i)))
		if seen[svc.Spec.ClusterIP] {
			t.Fatalf("IP %s handed out twice", svc.Spec.ClusterIP)
		}
		seen[svc.Spec.ClusterIP] = true
	}
	_, err := create(ctx, c, newService("one-too-many"))
	expectStatus(t, err, 500, "failed to allocate a serviceIP: range is full")
	mustDelete(t, ctx, c, "fill-07")
	mustCreate(t, ctx, c, newService("one-too-many"))
	_, err = create(ctx, c, newService("again"))
	expectStatus(t, err, 500, "range is full")
}

func TestRestartKeepsAllocations(t *testing.T) {
	t.Parallel()
	forEachModel(t, testRestartKeepsAllocations)
}

func testRestartKeepsAllocations(t *testing.T, model string) {
	s := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/27"})
	ctx := testContext(t)
	before := map[string]string{}
	for i := 0; i < 10; i++ {
		svc := mustCreate(t, ctx, s.client, newService(fmt.Sprintf("keep-%02d", i)))
		before[svc.Name] = svc.Spec.ClusterIP
	}
	s.stop()

	s2 := startServer(t, serverOptions{model: model, serviceRange: "10.0.0.0/27", etcd: s.etcd, dataDir: s.dataDir})
	c := s2.client
	used := map[string]bool{"10.0.0.1": true}
	for name, ip := range before {
		svc, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP != ip {
			t.Fatalf("after restart %s: %v %v", name, svc, err)
		}
		used[ip] = true
		expectTaken(t, ctx, c, ip)
	}
	// The remaining 19 addresses go to new Services, none twice.
	for i := 0; i < 19; i++ {
		svc := mustCreate(t, ctx, c, newService(fmt.Sprintf("new-%02d", i)))
		if used[svc.Spec.ClusterIP] {
			t.Fatalf("IP %s handed out twice after restart", svc.Spec.ClusterIP)
		}
		used[svc.Spec.ClusterIP] = true
	}
	_, err := create(ctx, c, newService("full"))
	expectStatus(t, err, 500, "range is full")
}

// TestMemoryAllocatorRebuilt: with in-memory allocators the server re-marks
// every stored Service's IP before it opens, so a restart hands out no IP
// twice.
func TestMemoryAllocatorRebuilt(t *testing.T) {
	t.Parallel()
	opts := serverOptions{serviceRange: "10.0.0.0/28", model: "bitmap", inMemory: true, rebuild: true}
	s := startServer(t, opts)
	ctx := testContext(t)
	// 14 usable, the kubernetes Service has one.
	for i := 0; i < 6; i++ {
		mustCreate(t, ctx, s.client, newService(fmt.Sprintf("mem-%d", i)))
	}
	s.stop()
	opts.etcd, opts.dataDir = s.etcd, s.dataDir
	s2 := startServer(t, opts)
	for i := 0; i < 7; i++ {
		mustCreate(t, ctx, s2.client, newService(fmt.Sprintf("more-%d", i)))
	}
	_, err := create(ctx, s2.client, newService("full"))
	expectStatus(t, err, 500, "range is full")
}
