package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/internal/webhook"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// The tests run our server as the API server the webhook serves: it
// serves IPAddresses and ServiceCIDRs as kube-apiserver 1.33 does, and
// allocates a Service's requested ClusterIP as kube-apiserver does. The
// test plays kube-apiserver's admission step: it sends each Service to the
// webhook as an AdmissionReview over HTTPS, applies the JSON patch the
// webhook answers with the library kube-apiserver uses, and creates the
// result.

// replica is one webhook on an HTTPS test server.
type replica struct {
	w   *webhook.Webhook
	srv *httptest.Server
}

func startReplica(t testing.TB, client kubernetes.Interface, policy servicecidrs.Policy) replica {
	t.Helper()
	return startReplicaWith(t, webhook.Config{Client: client, Policy: policy})
}

func startReplicaWith(t testing.TB, cfg webhook.Config) replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := webhook.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(w.Handler())
	t.Cleanup(srv.Close)
	deadline := time.Now().Add(30 * time.Second)
	for !w.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the webhook was not ready within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return replica{w: w, srv: srv}
}

// review sends obj (old for an update) to path and returns the response.
func (r replica) review(t testing.TB, path string, op admissionv1.Operation, namespace string, obj, old runtime.Object, dryRun bool) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: types.UID(fmt.Sprintf("uid-%d", time.Now().UnixNano())), Operation: op,
		Namespace: namespace, Object: runtime.RawExtension{Raw: raw}, DryRun: &dryRun}
	if old != nil {
		if req.OldObject.Raw, err = json.Marshal(old); err != nil {
			t.Fatal(err)
		}
	}
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	resp, err := r.srv.Client().Post(r.srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook answered HTTP %d", resp.StatusCode)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != req.UID {
		t.Fatalf("response %+v does not answer request %s", out.Response, req.UID)
	}
	return out.Response
}

// admitService is kube-apiserver's mutating admission of a Service create:
// the webhook's answer applied.
func (r replica) admitService(t testing.TB, svc *corev1.Service, dryRun bool) (*corev1.Service, *admissionv1.AdmissionResponse) {
	t.Helper()
	resp := r.review(t, webhook.ServicesPath, admissionv1.Create, svc.Namespace, svc, nil, dryRun)
	if !resp.Allowed || resp.Patch == nil {
		return svc, resp
	}
	raw, _ := json.Marshal(svc)
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("the webhook's patch %s: %v", resp.Patch, err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("apply the webhook's patch %s: %v", resp.Patch, err)
	}
	out := &corev1.Service{}
	if err := json.Unmarshal(patched, out); err != nil {
		t.Fatal(err)
	}
	return out, resp
}

func service(namespace, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
}

func inPrefix(t testing.TB, ip, prefix string) bool {
	t.Helper()
	return netip.MustParsePrefix(prefix).Contains(netip.MustParseAddr(ip))
}

// TestWebhookServices: a Service that asks for no ClusterIP is given one
// from the dynamic band, which the API server then stores as the user's
// choice; one in a namespace a scoped ServiceCIDR selects is given one of
// that scope; a requested address in a draining ServiceCIDR is refused
// with serve's text, and one that is taken is left to the API server; a
// dry run is let through with a warning and holds nothing; a headless
// Service is left alone.
func TestWebhookServices(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{Model: "ipaddress", ServiceRange: "10.96.0.0/16"})
	ctx := context.Background()
	mustCreateCIDR(t, srv.Client, "old", "10.200.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "true"})
	mustCreateCIDR(t, srv.Client, "team-a", "10.210.0.0/24", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"})
	mustCreateTeamA(t, srv.Client)
	r := startReplica(t, srv.Client, servicecidrs.Policy{})
	waitServed(t, r, "10.210.0.0/24")

	web, resp := r.admitService(t, service("default", "web"), false)
	if !resp.Allowed || web.Spec.ClusterIP == "" || !inPrefix(t, web.Spec.ClusterIP, "10.96.0.0/16") {
		t.Fatalf("a Service with no ClusterIP: %+v, ClusterIP %q; want one of 10.96.0.0/16 patched in", resp, web.Spec.ClusterIP)
	}
	if off := netip.MustParseAddr(web.Spec.ClusterIP).As4(); off[2] == 0 && off[3] < 255 {
		t.Errorf("picked %s, in the static band of 10.96.0.0/16", web.Spec.ClusterIP)
	}
	created, err := srv.Client.CoreV1().Services("default").Create(ctx, web, metav1.CreateOptions{})
	if err != nil || created.Spec.ClusterIP != web.Spec.ClusterIP {
		t.Fatalf("the API server's create of the picked address: %v, %v", created, err)
	}

	// A generateName create: kube-apiserver names it after its admission,
	// so the review carries no name.
	gen := service("a", "")
	gen.GenerateName = "gen-"
	if got, resp := r.admitService(t, gen, false); !resp.Allowed || !inPrefix(t, got.Spec.ClusterIP, "10.210.0.0/24") {
		t.Errorf("a generateName Service of a namespace the scope selects: %+v, ClusterIP %q; want one of 10.210.0.0/24 patched in", resp, got.Spec.ClusterIP)
	}

	scoped, _ := r.admitService(t, service("a", "api"), false)
	if !inPrefix(t, scoped.Spec.ClusterIP, "10.210.0.0/24") {
		t.Errorf("a Service of a namespace the scope selects got %q, want one of its 10.210.0.0/24", scoped.Spec.ClusterIP)
	}

	drain := service("default", "drain")
	drain.Spec.ClusterIP, drain.Spec.ClusterIPs = "10.200.0.7", []string{"10.200.0.7"}
	_, resp = r.admitService(t, drain, false)
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 422 || !strings.Contains(resp.Result.Message, "draining") {
		t.Errorf("a requested address in a draining ServiceCIDR: %+v, want 422 naming the draining range", resp.Result)
	}

	taken := service("default", "taken")
	taken.Spec.ClusterIP, taken.Spec.ClusterIPs = web.Spec.ClusterIP, []string{web.Spec.ClusterIP}
	if got, resp := r.admitService(t, taken, false); !resp.Allowed || resp.Patch != nil || got.Spec.ClusterIP != web.Spec.ClusterIP {
		t.Errorf("a requested address that is taken: %+v; want it let through unchanged for the API server to refuse", resp)
	}

	// kube-apiserver's dry run accepts a requested address of one of its
	// ServiceCIDRs only: a dry run is let through for it to pick, with a
	// warning naming what the create would get, and holds nothing.
	before := r.w.Held()
	if _, resp := r.admitService(t, service("default", "dry"), true); !resp.Allowed || resp.Patch != nil ||
		len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "the create would get ClusterIP(s) 10.96.") {
		t.Errorf("a dry run: %+v, want it let through with a warning naming the address", resp)
	}
	if after := r.w.Held(); after != before {
		t.Errorf("a dry run left %d holds, had %d", after, before)
	}

	headless := service("default", "headless")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	if _, resp := r.admitService(t, headless, false); !resp.Allowed || resp.Patch != nil {
		t.Errorf("a headless Service: %+v, want it let through unchanged", resp)
	}
}

// TestWebhookServiceCIDRs: a ServiceCIDR outside the guardrails is refused
// with serve's 422; a bad lifecycle annotation too; an allowed one passes.
func TestWebhookServiceCIDRs(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{Model: "ipaddress", ServiceRange: "10.96.0.0/16"})
	guardrails, err := servicecidrs.Guardrails{Forbidden: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}}, error(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, srv.Client, servicecidrs.Policy{Guardrails: guardrails})
	cidr := func(name, prefix string, annotations map[string]string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{prefix}}}
	}
	resp := r.review(t, webhook.ServiceCIDRsPath, admissionv1.Create, "", cidr("pods", "10.250.1.0/24", nil), nil, false)
	if resp.Allowed || resp.Result.Code != 422 || !strings.Contains(resp.Result.Message, "10.250.0.0/16") {
		t.Errorf("a ServiceCIDR inside a forbidden prefix: %+v, want 422 naming it", resp.Result)
	}
	resp = r.review(t, webhook.ServiceCIDRsPath, admissionv1.Create, "", cidr("typo", "10.220.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "yes"}), nil, false)
	if resp.Allowed || resp.Result.Code != 422 {
		t.Errorf("a bad lifecycle annotation: %+v, want 422", resp.Result)
	}
	if resp := r.review(t, webhook.ServiceCIDRsPath, admissionv1.Create, "", cidr("ok", "10.220.0.0/24", nil), nil, false); !resp.Allowed {
		t.Errorf("an allowed ServiceCIDR: %+v", resp.Result)
	}
}

// mustCreateTeamA creates namespace a, labelled team=a: the namespace the
// tests' scoped ServiceCIDRs select.
func mustCreateTeamA(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "a", Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustCreateCIDR(t testing.TB, client kubernetes.Interface, name, prefix string, annotations map[string]string) {
	t.Helper()
	_, err := client.NetworkingV1().ServiceCIDRs().Create(context.Background(), &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{prefix}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// waitServed waits until the replica serves prefix (the ServiceCIDR is
// ready and in its cache).
func waitServed(t testing.TB, r replica, prefix string) {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	for deadline := time.Now().Add(30 * time.Second); !r.w.Serves(context.Background(), p); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook does not serve %s within 30 s", prefix)
		}
	}
}
