package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/allocator/allocator/internal/version"
)

// helmVersion is the Helm that renders charts/allocator-webhook in the
// tests: built once from its Go module (go install) into the user's cache
// directory, as hack/lib/kube-apiserver-build.sh caches kube-apiserver;
// $HELM names another binary.
const helmVersion = "v3.22.0"

const chartDir = "../../charts/allocator-webhook"

// installVariant is one way to install the webhook, as a kustomization and
// as the chart's values.
type installVariant struct {
	name      string
	kustomize string // relative to deploy/
	helmArgs  []string
}

var installVariants = []installVariant{
	{name: "self-signed", kustomize: "webhook"},
	{name: "cert-manager", kustomize: "webhook/overlays/cert-manager", helmArgs: []string{"--set", "certificate.mode=certManager"}},
	{name: "monitoring", kustomize: "webhook/overlays/monitoring", helmArgs: []string{"--set", "monitoring.enabled=true"}},
}

// TestWebhookInstallRendersTheSameObjects renders each variant with
// `kubectl kustomize` and `helm template` and wants the same objects, field
// for field, apart from Helm's own labels and the Namespace (Helm's
// --create-namespace makes it). Every object is decoded strictly against
// its schema (the Kubernetes types; the cert-manager and Prometheus
// Operator objects against the fields of their CRDs that are used here),
// and the base is checked for what an install promises: replicas, the
// release's image, probes, a locked-down container, the webhook policies.
func TestWebhookInstallRendersTheSameObjects(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds Helm once and runs kubectl kustomize")
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	helm := helmBinary(t)
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ AppVersion string }
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.AppVersion != version.Release() {
		t.Errorf("charts/allocator-webhook/Chart.yaml appVersion %q; want the release %s", meta.AppVersion, version.Release())
	}
	for _, v := range installVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			kustomized := parseObjects(t, kubectlKustomize(t, filepath.Join(deployDir, v.kustomize)))
			templated := parseObjects(t, helmTemplate(t, helm, v.helmArgs...))
			compareInstalls(t, kustomized, templated)
			for _, objs := range []map[string]map[string]any{kustomized, templated} {
				for key, obj := range objs {
					if err := validateObject(obj); err != nil {
						t.Errorf("%s: %v", key, err)
					}
				}
			}
			if v.name == "self-signed" {
				checkBase(t, kustomized)
			}
		})
	}
}

// compareInstalls wants the same objects in both renderings.
func compareInstalls(t *testing.T, kustomized, templated map[string]map[string]any) {
	t.Helper()
	if _, ok := kustomized["Namespace//allocator-system"]; !ok {
		t.Error("the kustomization creates no Namespace allocator-system")
	}
	delete(kustomized, "Namespace//allocator-system")
	for _, obj := range templated {
		labels, _, _ := unstructuredMap(obj, "metadata", "labels")
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"} {
			delete(labels, l)
		}
	}
	if diff := cmp.Diff(sortedKeys(kustomized), sortedKeys(templated)); diff != "" {
		t.Fatalf("kubectl kustomize and helm template render different objects (-kustomize +helm):\n%s", diff)
	}
	for key, obj := range kustomized {
		if diff := cmp.Diff(obj, templated[key]); diff != "" {
			t.Errorf("%s differs (-kustomize +helm):\n%s", key, diff)
		}
	}
}

// checkBase checks what the base promises.
func checkBase(t *testing.T, objs map[string]map[string]any) {
	t.Helper()
	var d appsv1.Deployment
	decodeInto(t, objs, "Deployment/allocator-system/allocator-webhook", &d)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	want := imageRepository + ":" + version.Release()
	switch {
	case ptrValue(d.Spec.Replicas, 1) != 2:
		t.Errorf("replicas %d, want 2", ptrValue(d.Spec.Replicas, 1))
	case c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent:
		t.Errorf("image %s (%s), want %s (IfNotPresent)", c.Image, c.ImagePullPolicy, want)
	case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS:
		t.Error("readinessProbe is not /readyz over HTTPS")
	case c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS:
		t.Error("livenessProbe is not /healthz over HTTPS")
	case c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Error("no cpu and memory requests and memory limit")
	case !ptrValue(spec.SecurityContext.RunAsNonRoot, false) || spec.SecurityContext.SeccompProfile == nil ||
		spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("the pod is not runAsNonRoot with seccomp RuntimeDefault")
	case c.SecurityContext == nil || !ptrValue(c.SecurityContext.ReadOnlyRootFilesystem, false) ||
		ptrValue(c.SecurityContext.AllowPrivilegeEscalation, true) || !slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("the container is not read-only, without privilege escalation, with ALL capabilities dropped")
	case spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || len(spec.TopologySpreadConstraints) == 0:
		t.Error("no anti-affinity or topology spread")
	}
	var pdb policyv1.PodDisruptionBudget
	decodeInto(t, objs, "PodDisruptionBudget/allocator-system/allocator-webhook", &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	var svc corev1.Service
	decodeInto(t, objs, "Service/allocator-system/allocator-webhook", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https" ||
		c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 9443 {
		t.Errorf("Service ports %v to container ports %v: want 443 to https (9443)", svc.Spec.Ports, c.Ports)
	}
	var m admissionregistrationv1.MutatingWebhookConfiguration
	decodeInto(t, objs, "MutatingWebhookConfiguration//allocator-webhook", &m)
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	decodeInto(t, objs, "ValidatingWebhookConfiguration//allocator-webhook", &v)
	mw, vw := m.Webhooks[0], v.Webhooks[0]
	if *mw.FailurePolicy != admissionregistrationv1.Ignore || *mw.SideEffects != admissionregistrationv1.SideEffectClassNone ||
		ptrValue(mw.TimeoutSeconds, 10) != 5 || *mw.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy ||
		*mw.MatchPolicy != admissionregistrationv1.Equivalent || !slices.Equal(mw.AdmissionReviewVersions, []string{"v1"}) ||
		mw.Rules[0].Resources[0] != "services" || mw.ClientConfig.Service.Path == nil || *mw.ClientConfig.Service.Path != "/mutate-services" {
		t.Errorf("mutating webhook %+v: want services, Ignore, None, 5 s, IfNeeded, Equivalent, v1, /mutate-services", mw)
	}
	if *vw.FailurePolicy != admissionregistrationv1.Ignore || vw.Rules[0].Resources[0] != "servicecidrs" ||
		vw.ClientConfig.Service.Path == nil || *vw.ClientConfig.Service.Path != "/validate-servicecidrs" {
		t.Errorf("validating webhook %+v: want servicecidrs, Ignore, /validate-servicecidrs", vw)
	}
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	if !slices.Equal(mw.Rules[0].Operations, ops) || !slices.Equal(vw.Rules[0].Operations, ops) {
		t.Error("the webhooks are not for CREATE and UPDATE")
	}
}

// parseObjects reads a multi-document YAML stream into its objects by
// kind/namespace/name.
func parseObjects(t *testing.T, data []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		kind, _ := obj["kind"].(string)
		ns, _, _ := unstructuredString(obj, "metadata", "namespace")
		name, _, _ := unstructuredString(obj, "metadata", "name")
		key := kind + "/" + ns + "/" + name
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = obj
	}
	if len(out) == 0 {
		t.Fatal("nothing rendered")
	}
	return out
}

func unstructuredMap(obj map[string]any, path ...string) (map[string]any, bool, error) {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = next
	}
	return cur, true, nil
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	m, ok, _ := unstructuredMap(obj, path[:len(path)-1]...)
	if !ok {
		return "", false, nil
	}
	s, ok := m[path[len(path)-1]].(string)
	return s, ok, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// strictDecoder decodes the Kubernetes kinds, refusing unknown and
// duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// validateObject decodes obj strictly against its schema.
func validateObject(obj map[string]any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	apiVersion, _ := obj["apiVersion"].(string)
	if crd, ok := crdSchemas[apiVersion+"/"+obj["kind"].(string)]; ok {
		return yaml.UnmarshalStrict(data, crd())
	}
	_, _, err = strictDecoder.Decode(data, nil, nil)
	return err
}

func decodeInto(t *testing.T, objs map[string]map[string]any, key string, into runtime.Object) {
	t.Helper()
	obj, ok := objs[key]
	if !ok {
		t.Fatalf("no %s; rendered: %v", key, sortedKeys(objs))
	}
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := strictDecoder.Decode(data, nil, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// kubectlKustomize is `kubectl kustomize dir`.
func kubectlKustomize(t *testing.T, dir string) []byte {
	t.Helper()
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderrOf(err))
	}
	return out
}

// helmTemplate renders the chart as `helm install -n allocator-system`
// would, for Kubernetes 1.33 (the chart's least).
func helmTemplate(t *testing.T, helm string, args ...string) []byte {
	t.Helper()
	args = append([]string{"template", "allocator-webhook", chartDir, "--namespace", "allocator-system", "--kube-version", "1.33.0"}, args...)
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
	}
	return out
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

var helmOnce struct {
	sync.Once
	path string
	err  error
}

// helmBinary is $HELM, or Helm helmVersion built once into
// <user cache>/allocator/helm/<version>/helm.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	helmOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			helmOnce.err = err
			return
		}
		dir := filepath.Join(cache, "allocator", "helm", helmVersion)
		helmOnce.path = filepath.Join(dir, "helm")
		if _, err := os.Stat(helmOnce.path); err == nil {
			return
		}
		helmOnce.err = buildHelm(dir)
	})
	if helmOnce.err != nil {
		t.Fatalf("build helm %s (set HELM to use another): %v", helmVersion, helmOnce.err)
	}
	return helmOnce.path
}

// buildHelm installs Helm into dir through a directory of its own, renamed
// into place, so that a concurrent build never leaves a half-written binary.
func buildHelm(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	started := time.Now()
	cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
	cmd.Dir = tmp // outside this module: the install resolves Helm's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install helm.sh/helm/v3/cmd/helm@%s: %v\n%s", helmVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(dir, "helm")); statErr != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "built helm %s into %s in %s\n", helmVersion, dir, time.Since(started).Round(time.Second))
	return nil
}
