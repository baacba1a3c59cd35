package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Our server (internal/testserver) serves neither Secrets nor webhook
// configurations, so these tests run the bootstrap against client-go's
// fake clientset, with reactors that give those three resources what the
// bootstrap relies on in kube-apiserver: a create of an existing name
// fails with AlreadyExists, and an update whose resourceVersion is not the
// stored one fails with Conflict.

var (
	testSecret  = types.NamespacedName{Namespace: "allocator-system", Name: "allocator-webhook-tls"}
	testService = types.NamespacedName{Namespace: "allocator-system", Name: "allocator-webhook"}
	// testNames are the names kube-apiserver may verify the certificate for.
	testNames = []string{"allocator-webhook.allocator-system.svc", "allocator-webhook.allocator-system.svc.cluster.local"}
)

const testConfiguration = "allocator-webhook"

var secretsResource = corev1.SchemeGroupVersion.WithResource("secrets")

// apiServer is the fake clientset with optimistic concurrency on Secrets
// and webhook configurations.
type apiServer struct {
	*fake.Clientset
	mu       sync.Mutex
	versions map[string]int // resource/namespace/name → resourceVersion; guarded by mu
	creates  atomic.Int32   // Secrets created
	updates  atomic.Int32   // Secret updates that succeeded
	// beforeSecretUpdate, when set, runs before a Secret update is judged.
	beforeSecretUpdate func()
}

func newAPIServer(t *testing.T, objects ...runtime.Object) *apiServer {
	t.Helper()
	a := &apiServer{Clientset: fake.NewClientset(objects...), versions: map[string]int{}}
	for _, res := range []string{"secrets", "mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		a.PrependReactor("get", res, a.get)
		a.PrependReactor("create", res, a.create)
		a.PrependReactor("update", res, a.update)
	}
	return a
}

func versionKey(a k8stesting.Action, name string) string {
	return a.GetResource().Resource + "/" + a.GetNamespace() + "/" + name
}

func (a *apiServer) get(action k8stesting.Action) (bool, runtime.Object, error) {
	g := action.(k8stesting.GetAction)
	a.mu.Lock()
	defer a.mu.Unlock()
	obj, err := a.Tracker().Get(g.GetResource(), g.GetNamespace(), g.GetName())
	if err != nil {
		return true, nil, err
	}
	obj = obj.DeepCopyObject()
	setVersion(obj, a.versions[versionKey(action, g.GetName())])
	return true, obj, nil
}

func (a *apiServer) create(action k8stesting.Action) (bool, runtime.Object, error) {
	obj := action.(k8stesting.CreateAction).GetObject().DeepCopyObject()
	m, _ := meta.Accessor(obj)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.Tracker().Create(action.GetResource(), obj, action.GetNamespace()); err != nil {
		return true, nil, err
	}
	if action.GetResource().Resource == "secrets" {
		a.creates.Add(1)
	}
	a.versions[versionKey(action, m.GetName())] = 1
	setVersion(obj, 1)
	return true, obj, nil
}

func (a *apiServer) update(action k8stesting.Action) (bool, runtime.Object, error) {
	secret := action.GetResource().Resource == "secrets"
	if secret && a.beforeSecretUpdate != nil {
		a.beforeSecretUpdate()
	}
	obj := action.(k8stesting.UpdateAction).GetObject().DeepCopyObject()
	m, _ := meta.Accessor(obj)
	key := versionKey(action, m.GetName())
	a.mu.Lock()
	defer a.mu.Unlock()
	if m.GetResourceVersion() != strconv.Itoa(a.versions[key]) {
		return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), m.GetName(), nil)
	}
	a.versions[key]++
	setVersion(obj, a.versions[key])
	if err := a.Tracker().Update(action.GetResource(), obj, action.GetNamespace()); err != nil {
		return true, nil, err
	}
	if secret {
		a.updates.Add(1)
	}
	return true, obj, nil
}

func setVersion(obj runtime.Object, v int) {
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.Itoa(v))
}

func (a *apiServer) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := a.CoreV1().Secrets(testSecret.Namespace).Get(context.Background(), testSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// caBundles are the caBundles of every webhook of both configurations.
func (a *apiServer) caBundles(t *testing.T) [][]byte {
	t.Helper()
	ctx := context.Background()
	m, err := a.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, testConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, testConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, cc := range append(mutatingClientConfigs(m), validatingClientConfigs(v)...) {
		out = append(out, cc.CABundle)
	}
	return out
}

// configurations are the webhook configurations as deploy/webhook has
// them: two webhooks in the mutating one (to see that each is patched),
// one in the validating one, no caBundle.
func configurations() []runtime.Object {
	svc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: testService.Namespace, Name: testService.Name, Path: ptr.To(path), Port: ptr.To[int32](443)}}
	}
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	return []runtime.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testConfiguration, Labels: map[string]string{"app.kubernetes.io/name": "allocator"}},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: "services.allocator.github.io", ClientConfig: svc(ServicesPath), SideEffects: &none, FailurePolicy: &ignore,
					AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5)},
				{Name: "other.allocator.github.io", ClientConfig: svc("/other"), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}},
			},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testConfiguration},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "servicecidrs.allocator.github.io", ClientConfig: svc(ServiceCIDRsPath), SideEffects: &none, FailurePolicy: &ignore,
					AdmissionReviewVersions: []string{"v1"}},
			},
		},
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// replicaOf is one webhook replica's bootstrap, synced by hand (the
// background loop is not started).
func replicaOf(t *testing.T, api *apiServer, now func() time.Time) *SelfSigned {
	t.Helper()
	s, err := newSelfSigned(context.Background(), SelfSignedConfig{Client: api, Secret: testSecret, Service: testService,
		MutatingConfiguration: testConfiguration, ValidatingConfiguration: testConfiguration, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSync(t *testing.T, s *SelfSigned) bool {
	t.Helper()
	complete, err := s.sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return complete
}

// served is the leaf certificate s serves.
func served(t *testing.T, s *SelfSigned) *x509.Certificate {
	t.Helper()
	c, err := s.GetCertificate(nil)
	if err != nil || c == nil || c.Leaf == nil {
		t.Fatalf("no certificate served: %v", err)
	}
	return c.Leaf
}

// verifies checks leaf against bundle for every name kube-apiserver may use, at now.
func verifies(leaf *x509.Certificate, bundle []byte, now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return x509.UnknownAuthorityError{}
	}
	for _, name := range testNames {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now}); err != nil {
			return err
		}
	}
	return nil
}

func TestSelfSignedCreatesSecretAndPatchesCABundles(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, configurations()...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := StartSelfSigned(ctx, SelfSignedConfig{Client: api, Secret: testSecret, Service: testService,
		MutatingConfiguration: testConfiguration, ValidatingConfiguration: testConfiguration})
	if err != nil {
		t.Fatal(err)
	}
	secret := api.secret(t)
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q, want %q", secret.Type, corev1.SecretTypeTLS)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(secret.Data[k]) == 0 {
			t.Errorf("the Secret has no %s", k)
		}
	}
	bundles := api.caBundles(t)
	if len(bundles) != 3 {
		t.Fatalf("%d webhooks, want 3", len(bundles))
	}
	for i, b := range bundles {
		if !bytes.Equal(b, secret.Data["ca.crt"]) {
			t.Errorf("webhook %d: caBundle is not the Secret's ca.crt", i)
		}
	}
	if err := verifies(served(t, s), bundles[0], time.Now()); err != nil {
		t.Errorf("the served certificate does not verify with the caBundle: %v", err)
	}

	// Nothing but the caBundles changed.
	want := configurations()
	m, _ := api.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, testConfiguration, metav1.GetOptions{})
	v, _ := api.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, testConfiguration, metav1.GetOptions{})
	for _, cc := range append(mutatingClientConfigs(m), validatingClientConfigs(v)...) {
		cc.CABundle = nil
	}
	if diff := cmp.Diff(want, []runtime.Object{m, v}, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "ManagedFields")); diff != "" {
		t.Errorf("the configurations changed beyond their caBundles (-before +after):\n%s", diff)
	}

	// A real TLS handshake on loopback, as kube-apiserver makes it: the
	// Service's .svc name, the caBundle as the only root.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundles[0])
	for _, name := range testNames {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
			&tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("TLS handshake for %s: %v", name, err)
			continue
		}
		conn.Close()
	}
}

func TestSelfSignedReplicasAgree(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, configurations()...)
	const replicas = 4
	ss := make([]*SelfSigned, replicas)
	var wg sync.WaitGroup
	for i := range ss {
		ss[i] = replicaOf(t, api, time.Now)
		wg.Go(func() {
			if _, err := ss[i].sync(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := api.creates.Load(); n != 1 {
		t.Errorf("%d Secrets created, want 1", n)
	}
	first := served(t, ss[0])
	for i, s := range ss[1:] {
		if !served(t, s).Equal(first) {
			t.Errorf("replica %d serves another certificate than replica 0", i+1)
		}
	}
	for _, b := range api.caBundles(t) {
		if err := verifies(first, b, time.Now()); err != nil {
			t.Errorf("the shared certificate does not verify with a caBundle: %v", err)
		}
	}
}

func TestSelfSignedRenews(t *testing.T) {
	t.Parallel()
	start := time.Now()
	clk := &clock{now: start}
	api := newAPIServer(t, configurations()...)
	a, b := replicaOf(t, api, clk.Now), replicaOf(t, api, clk.Now)
	mustSync(t, a)
	mustSync(t, b)
	leaf0, bundle0 := served(t, a), api.secret(t).Data["ca.crt"]

	// Before two thirds of the serving certificate's life: nothing changes.
	clk.set(start.Add(DefaultServingLifetime * 2 / 3).Add(-time.Hour))
	mustSync(t, a)
	if !served(t, a).Equal(leaf0) || api.updates.Load() != 0 {
		t.Fatal("renewed before two thirds of the serving certificate's life")
	}

	// Past it: a new serving certificate of the same CA, which the
	// caBundle already holds; the other replica serves it on its next sync.
	clk.set(start.Add(DefaultServingLifetime * 2 / 3).Add(time.Hour))
	mustSync(t, a)
	mustSync(t, b)
	leaf1 := served(t, a)
	if leaf1.Equal(leaf0) || !served(t, b).Equal(leaf1) || api.updates.Load() != 1 {
		t.Fatalf("serving certificate not renewed once and shared (updates %d)", api.updates.Load())
	}
	if !bytes.Equal(api.secret(t).Data["ca.crt"], bundle0) {
		t.Error("a serving renewal changed the CA bundle")
	}
	if err := verifies(leaf1, bundle0, clk.Now()); err != nil {
		t.Errorf("the renewed certificate does not verify with the caBundle: %v", err)
	}

	// Past two thirds of the CA's life: a new CA, the old one kept in the
	// bundle (the other replica still serves a certificate it signed).
	clk.set(start.Add(DefaultCALifetime * 2 / 3).Add(time.Hour))
	mustSync(t, a)
	bundle2 := api.secret(t).Data["ca.crt"]
	if bytes.Equal(bundle2, bundle0) {
		t.Fatal("the CA was not renewed")
	}
	for _, cb := range api.caBundles(t) {
		if !bytes.Equal(cb, bundle2) {
			t.Error("a caBundle is not the new bundle")
		}
	}
	leaf2 := served(t, a)
	now := clk.Now()
	if err := verifies(leaf2, bundle2, now); err != nil {
		t.Errorf("the new CA's certificate does not verify with the new bundle: %v", err)
	}
	// The old serving certificate expired long ago; what matters is that
	// its CA is still trusted: check the chain at a time it was valid.
	if err := verifies(leaf1, bundle2, leaf1.NotBefore.Add(time.Hour)); err != nil {
		t.Errorf("the old CA left the bundle while still valid: %v", err)
	}
}

func TestSelfSignedConflictReadsTheOtherReplicasRenewal(t *testing.T) {
	t.Parallel()
	start := time.Now()
	clk := &clock{now: start}
	api := newAPIServer(t, configurations()...)
	a, b := replicaOf(t, api, clk.Now), replicaOf(t, api, clk.Now)
	mustSync(t, a)
	clk.set(start.Add(DefaultServingLifetime * 2 / 3).Add(time.Hour))
	// a's update is judged only after b stored its renewal: a loses on the
	// resourceVersion, reads b's certificate and keeps it. (b's write goes
	// to the tracker directly: the fake clientset is locked while a reactor
	// runs.)
	var once sync.Once
	api.beforeSecretUpdate = func() {
		once.Do(func() {
			obj, err := api.Tracker().Get(secretsResource, testSecret.Namespace, testSecret.Name)
			if err != nil {
				t.Error(err)
				return
			}
			stored := obj.(*corev1.Secret).DeepCopy()
			pair, err := parsePair(stored.Data)
			if err != nil {
				t.Error(err)
				return
			}
			next, err := b.renew(pair, clk.Now())
			if err != nil {
				t.Error(err)
				return
			}
			stored.Data = next.data()
			api.mu.Lock()
			defer api.mu.Unlock()
			api.versions["secrets/"+testSecret.Namespace+"/"+testSecret.Name]++
			if err := api.Tracker().Update(secretsResource, stored, testSecret.Namespace); err != nil {
				t.Error(err)
			}
		})
	}
	mustSync(t, a)
	if n := api.updates.Load(); n != 0 {
		t.Errorf("%d Secret updates by a, want 0 (b's renewal came first)", n)
	}
	mustSync(t, b)
	if !served(t, a).Equal(served(t, b)) {
		t.Error("the replicas serve different certificates after the race")
	}
	if !served(t, a).Equal(parseLeaf(t, api.secret(t).Data["tls.crt"])) {
		t.Error("a serves another certificate than the Secret's")
	}
}

func parseLeaf(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	certs, err := parseCertificates(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestSelfSignedReplacesWhatDoesNotServe(t *testing.T) {
	t.Parallel()
	// A CA and serving certificate made for another Service.
	other := newAPIServer(t)
	o, err := newSelfSigned(context.Background(), SelfSignedConfig{Client: other, Secret: testSecret,
		Service: types.NamespacedName{Namespace: "elsewhere", Name: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, o)
	foreign := other.secret(t).Data

	for name, tc := range map[string]struct {
		data   map[string][]byte
		keepCA bool
	}{
		"garbage":         {data: map[string][]byte{"ca.crt": []byte("x"), "tls.crt": []byte("y")}},
		"empty":           {},
		"other names":     {data: foreign, keepCA: true},
		"key of other CA": {data: map[string][]byte{"ca.crt": foreign["ca.crt"], "ca.key": foreign["tls.key"], "tls.crt": foreign["tls.crt"], "tls.key": foreign["tls.key"]}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			existing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testSecret.Namespace, Name: testSecret.Name}, Data: tc.data}
			api := newAPIServer(t, append(configurations(), existing)...)
			s := replicaOf(t, api, time.Now)
			mustSync(t, s)
			data := api.secret(t).Data
			if err := verifies(served(t, s), data["ca.crt"], time.Now()); err != nil {
				t.Errorf("the replacement does not verify: %v", err)
			}
			if got := bytes.Equal(data["ca.crt"], foreign["ca.crt"]); got != tc.keepCA {
				t.Errorf("CA kept: %v, want %v", got, tc.keepCA)
			}
			for _, cb := range api.caBundles(t) {
				if !bytes.Equal(cb, data["ca.crt"]) {
					t.Error("a caBundle is not the Secret's ca.crt")
				}
			}
		})
	}
}

func TestSelfSignedWaitsForConfigurations(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t)
	s := replicaOf(t, api, time.Now)
	if mustSync(t, s) {
		t.Fatal("complete without the configurations")
	}
	served(t, s) // served meanwhile: failurePolicy Ignore covers the gap
	for _, obj := range configurations() {
		var err error
		switch c := obj.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			_, err = api.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), c, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			_, err = api.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), c, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !mustSync(t, s) {
		t.Fatal("not complete once the configurations exist")
	}
	for _, cb := range api.caBundles(t) {
		if err := verifies(served(t, s), cb, time.Now()); err != nil {
			t.Errorf("caBundle: %v", err)
		}
	}
}

func TestSelfSignedKeepsServingTheOldCAUntilTheBundleHoldsTheNew(t *testing.T) {
	t.Parallel()
	start := time.Now()
	clk := &clock{now: start}
	api := newAPIServer(t)
	s := replicaOf(t, api, clk.Now)
	mustSync(t, s)
	leaf0 := served(t, s)
	clk.set(start.Add(DefaultCALifetime * 2 / 3).Add(time.Hour))
	mustSync(t, s) // the Secret gets a new CA; no configuration can carry it
	if !served(t, s).Equal(leaf0) {
		t.Fatal("serves a certificate of the new CA while no caBundle holds it")
	}
	for _, obj := range configurations() {
		if err := api.Tracker().Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, s)
	if served(t, s).Equal(leaf0) {
		t.Fatal("still the old CA's certificate once the caBundles hold the new")
	}
}
