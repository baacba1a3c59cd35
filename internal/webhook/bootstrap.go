package webhook

// The self-signed serving certificate. Without certificate files, the
// webhook keeps a CA and a serving certificate for its Service in a
// Secret, serves that certificate, and keeps the caBundle of its webhook
// configurations at the CA, so that one `kubectl apply` installs a working
// webhook on a cluster without cert-manager.
//
// Invariants and why:
//   - Replicas agree through the Secret: it is created only when absent
//     (the loser of a create race reads the winner's) and changed only by an
//     update conditional on the resourceVersion read (the loser reads
//     again). So every replica serves a certificate of one shared CA.
//   - What a replica serves verifies against the caBundle kube-apiserver
//     holds: the serving certificate is renewed under the same CA, and a
//     new CA goes into the bundle beside the previous ones (kept until they
//     expire), its bundle patched in before the replica serves a
//     certificate it signed.
//   - Only the named configurations' webhooks' clientConfig.caBundle is
//     written; every other field is sent back as read.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

const (
	// DefaultCALifetime is how long the self-signed CA is valid.
	DefaultCALifetime = 10 * 365 * 24 * time.Hour
	// DefaultServingLifetime is how long a serving certificate is valid;
	// it is renewed after two thirds of it, as cert-manager renews.
	DefaultServingLifetime = 90 * 24 * time.Hour

	// selfSignedResync is how often the Secret and the caBundles are
	// looked at: a renewal by another replica is served within it, and a
	// caBundle someone overwrote is written again.
	selfSignedResync = time.Minute
	// selfSignedRetry is the wait while a configuration is not patched
	// yet (`kubectl apply` creates the configurations after the Deployment).
	selfSignedRetry = 5 * time.Second
	// backdate covers clock skew between the replica that signs and the
	// kube-apiserver that verifies.
	backdate = 5 * time.Minute
	// maxSecretAttempts bounds the re-reads when other replicas keep
	// changing the Secret.
	maxSecretAttempts = 5
)

// The Secret's keys: tls.crt and tls.key as in a kubernetes.io/tls Secret
// (and cert-manager's), ca.crt the bundle (the current CA first), ca.key
// the current CA's key.
const (
	keyCACert  = "ca.crt"
	keyCAKey   = "ca.key"
	keyTLSCert = corev1.TLSCertKey
	keyTLSKey  = corev1.TLSPrivateKeyKey
)

// SelfSignedConfig is what StartSelfSigned needs.
type SelfSignedConfig struct {
	// Client talks to the kube-apiserver the webhook serves.
	Client kubernetes.Interface
	// Secret holds the CA and the serving certificate; it is created when
	// absent.
	Secret types.NamespacedName
	// Service is the Service kube-apiserver calls the webhook through. The
	// certificate names name, name.namespace, name.namespace.svc (the name
	// kube-apiserver verifies) and name.namespace.svc.cluster.local.
	Service types.NamespacedName
	// MutatingConfiguration and ValidatingConfiguration name the webhook
	// configurations whose caBundle is kept at the CA ("": none).
	MutatingConfiguration, ValidatingConfiguration string
	// CALifetime and ServingLifetime default to DefaultCALifetime and
	// DefaultServingLifetime.
	CALifetime, ServingLifetime time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

// SelfSigned serves the certificate kept in the Secret. It is safe for
// concurrent use.
type SelfSigned struct {
	cfg     SelfSignedConfig
	log     klog.Logger
	current atomic.Pointer[certPair]
	// missing are the configurations last found absent, so that each is
	// logged once; only the sync loop touches it.
	missing map[string]bool
}

// StartSelfSigned makes sure the Secret holds a current certificate,
// patches the caBundles it can, and keeps both current until ctx ends. It
// fails when the Secret can be neither read nor written.
func StartSelfSigned(ctx context.Context, cfg SelfSignedConfig) (*SelfSigned, error) {
	s, err := newSelfSigned(ctx, cfg)
	if err != nil {
		return nil, err
	}
	complete, err := s.sync(ctx)
	if err != nil {
		return nil, err
	}
	go s.run(ctx, complete)
	return s, nil
}

// newSelfSigned checks cfg and fills in its defaults.
func newSelfSigned(ctx context.Context, cfg SelfSignedConfig) (*SelfSigned, error) {
	if cfg.Client == nil || cfg.Secret.Name == "" || cfg.Secret.Namespace == "" || cfg.Service.Name == "" || cfg.Service.Namespace == "" {
		return nil, errors.New("self-signed certificate: a client, the Secret and the Service are needed")
	}
	if cfg.CALifetime <= 0 {
		cfg.CALifetime = DefaultCALifetime
	}
	if cfg.ServingLifetime <= 0 {
		cfg.ServingLifetime = DefaultServingLifetime
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &SelfSigned{cfg: cfg, log: klog.FromContext(ctx).WithName("self-signed"), missing: map[string]bool{}}, nil
}

// GetCertificate is tls.Config's GetCertificate.
func (s *SelfSigned) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.current.Load().tls, nil
}

// run syncs every selfSignedResync, or every selfSignedRetry while a
// configuration is not patched, until ctx ends.
func (s *SelfSigned) run(ctx context.Context, complete bool) {
	for {
		wait := selfSignedResync
		if !complete {
			wait = selfSignedRetry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var err error
		if complete, err = s.sync(ctx); err != nil {
			s.log.Error(err, "Could not keep the self-signed serving certificate current")
		}
	}
}

// sync brings the Secret up to date, patches the caBundles, and serves the
// Secret's certificate. complete reports that every named configuration
// carries the bundle. A certificate of a CA the caBundles may not hold yet
// is served only once they do (or when nothing is served yet).
func (s *SelfSigned) sync(ctx context.Context) (complete bool, err error) {
	pair, err := s.ensureSecret(ctx)
	if err != nil {
		return false, err
	}
	complete = s.patchConfigurations(ctx, pair.bundlePEM)
	if old := s.current.Load(); complete || old == nil || old.ca.Equal(pair.ca) {
		s.current.Store(pair)
	}
	return complete, nil
}

// ensureSecret reads the Secret and returns its certificate, creating the
// Secret when absent and renewing what is due; on a lost race it reads the
// other replica's write.
func (s *SelfSigned) ensureSecret(ctx context.Context) (*certPair, error) {
	secrets := s.cfg.Client.CoreV1().Secrets(s.cfg.Secret.Namespace)
	for range maxSecretAttempts {
		now := s.cfg.Now()
		stored, err := secrets.Get(ctx, s.cfg.Secret.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			pair, err := s.renew(nil, now)
			if err != nil {
				return nil, err
			}
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: s.cfg.Secret.Name, Namespace: s.cfg.Secret.Namespace,
					Labels: map[string]string{"app.kubernetes.io/name": "allocator", "app.kubernetes.io/component": "webhook"}},
				Type: corev1.SecretTypeTLS,
				Data: pair.data(),
			}
			_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica created it first: serve theirs
			}
			if err != nil {
				return nil, fmt.Errorf("create the Secret %s: %w", s.cfg.Secret, err)
			}
			s.log.Info("Created the self-signed CA and serving certificate", "secret", s.cfg.Secret, "notAfter", pair.leaf.NotAfter)
			return pair, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the Secret %s: %w", s.cfg.Secret, err)
		}
		pair, perr := parsePair(stored.Data)
		why := s.renewalReason(pair, perr, now)
		if why == "" {
			return pair, nil
		}
		if perr != nil {
			pair = nil // nothing of it is kept
		}
		next, err := s.renew(pair, now)
		if err != nil {
			return nil, err
		}
		updated := stored.DeepCopy()
		updated.Data = next.data()
		_, err = secrets.Update(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica changed it: judge theirs
		}
		if err != nil {
			return nil, fmt.Errorf("update the Secret %s: %w", s.cfg.Secret, err)
		}
		s.log.Info("Renewed the self-signed serving certificate", "secret", s.cfg.Secret, "reason", why,
			"newCA", pair == nil || !next.ca.Equal(pair.ca), "notAfter", next.leaf.NotAfter)
		return next, nil
	}
	return nil, fmt.Errorf("the Secret %s changed under every one of %d attempts", s.cfg.Secret, maxSecretAttempts)
}

// renewalReason says why the stored pair must be replaced, or "".
func (s *SelfSigned) renewalReason(p *certPair, parseErr error, now time.Time) string {
	switch {
	case parseErr != nil:
		return fmt.Sprintf("unusable: %v", parseErr)
	case !now.Before(renewAt(p.ca)):
		return "the CA is past two thirds of its life"
	case !now.Before(renewAt(p.leaf)):
		return "the serving certificate is past two thirds of its life"
	}
	if err := p.verify(s.dnsNames(), now); err != nil {
		return fmt.Sprintf("the serving certificate does not verify: %v", err)
	}
	return ""
}

// renew returns the pair that replaces old (nil: none usable): a new
// serving certificate under old's CA, or under a new CA when old has none
// or its CA is due, the new CA first in the bundle before the old CAs that
// have not expired.
func (s *SelfSigned) renew(old *certPair, now time.Time) (*certPair, error) {
	p := &certPair{}
	if old != nil && now.Before(renewAt(old.ca)) {
		p.ca, p.caKey = old.ca, old.caKey
		p.bundle = unexpired(old.bundle, now)
	} else {
		var err error
		if p.ca, p.caKey, err = newCA(now, s.cfg.CALifetime); err != nil {
			return nil, err
		}
		p.bundle = []*x509.Certificate{p.ca}
		if old != nil {
			p.bundle = append(p.bundle, unexpired(old.bundle, now)...)
		}
	}
	leaf, key, err := newServing(now, s.cfg.ServingLifetime, s.dnsNames(), p.ca, p.caKey)
	if err != nil {
		return nil, err
	}
	p.leaf, p.leafKey = leaf, key
	if err := p.encode(); err != nil {
		return nil, err
	}
	return p, nil
}

// dnsNames are the names the serving certificate holds.
func (s *SelfSigned) dnsNames() []string {
	svc := s.cfg.Service
	base := svc.Name + "." + svc.Namespace
	return []string{svc.Name, base, base + ".svc", base + ".svc.cluster.local"}
}

// patchConfigurations keeps the named configurations' caBundles at bundle
// and reports whether every one carries it.
func (s *SelfSigned) patchConfigurations(ctx context.Context, bundle []byte) bool {
	complete := true
	check := func(kind, name string, err error) {
		key := kind + "/" + name
		switch {
		case apierrors.IsNotFound(err):
			complete = false
			if !s.missing[key] {
				s.log.Info("Waiting for the webhook configuration, to set its caBundle", "kind", kind, "name", name)
			}
			s.missing[key] = true
		case err != nil:
			complete = false
			s.log.Error(err, "Could not set the caBundle", "kind", kind, "name", name)
		default:
			delete(s.missing, key)
		}
	}
	if name := s.cfg.MutatingConfiguration; name != "" {
		api := s.cfg.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
		check("MutatingWebhookConfiguration", name, patchCABundle(ctx, api, name, bundle, mutatingClientConfigs))
	}
	if name := s.cfg.ValidatingConfiguration; name != "" {
		api := s.cfg.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		check("ValidatingWebhookConfiguration", name, patchCABundle(ctx, api, name, bundle, validatingClientConfigs))
	}
	return complete
}

// webhookConfigurations is the part of a typed client of webhook
// configurations that patchCABundle uses.
type webhookConfigurations[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// patchCABundle sets every webhook's clientConfig.caBundle of the named
// configuration to bundle, updating it (conditional on the resourceVersion
// read) only when one differs.
func patchCABundle[T any](ctx context.Context, api webhookConfigurations[T], name string, bundle []byte,
	clientConfigs func(T) []*admissionregistrationv1.WebhookClientConfig) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		for _, cc := range clientConfigs(obj) {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle, changed = bytes.Clone(bundle), true
			}
		}
		if !changed {
			return nil
		}
		_, err = api.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	})
}

func mutatingClientConfigs(c *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
	var out []*admissionregistrationv1.WebhookClientConfig
	for i := range c.Webhooks {
		out = append(out, &c.Webhooks[i].ClientConfig)
	}
	return out
}

func validatingClientConfigs(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
	var out []*admissionregistrationv1.WebhookClientConfig
	for i := range c.Webhooks {
		out = append(out, &c.Webhooks[i].ClientConfig)
	}
	return out
}

// certPair is a CA and the serving certificate it signed, as kept in the
// Secret.
type certPair struct {
	ca      *x509.Certificate
	caKey   crypto.Signer
	bundle  []*x509.Certificate // ca first, then older CAs not expired
	leaf    *x509.Certificate
	leafKey crypto.Signer

	// The Secret's bytes, and the certificate as served.
	bundlePEM, caKeyPEM, leafPEM, leafKeyPEM []byte
	tls                                      *tls.Certificate
}

func (p *certPair) data() map[string][]byte {
	return map[string][]byte{keyCACert: p.bundlePEM, keyCAKey: p.caKeyPEM, keyTLSCert: p.leafPEM, keyTLSKey: p.leafKeyPEM}
}

// encode fills the PEM fields and the tls.Certificate from the parsed ones.
func (p *certPair) encode() error {
	var bundle bytes.Buffer
	for _, c := range p.bundle {
		if err := pem.Encode(&bundle, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}); err != nil {
			return err
		}
	}
	p.bundlePEM = bundle.Bytes()
	p.leafPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.leaf.Raw})
	var err error
	if p.caKeyPEM, err = encodeKey(p.caKey); err != nil {
		return err
	}
	if p.leafKeyPEM, err = encodeKey(p.leafKey); err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(p.leafPEM, p.leafKeyPEM)
	if err != nil {
		return fmt.Errorf("the new serving certificate: %w", err)
	}
	p.tls = &cert
	return nil
}

// parsePair reads a Secret's data; an error names what is missing or does
// not fit together.
func parsePair(data map[string][]byte) (*certPair, error) {
	for _, k := range []string{keyCACert, keyCAKey, keyTLSCert, keyTLSKey} {
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("no %s", k)
		}
	}
	p := &certPair{bundlePEM: data[keyCACert], caKeyPEM: data[keyCAKey], leafPEM: data[keyTLSCert], leafKeyPEM: data[keyTLSKey]}
	var err error
	if p.bundle, err = parseCertificates(p.bundlePEM); err != nil {
		return nil, fmt.Errorf("%s: %w", keyCACert, err)
	}
	p.ca = p.bundle[0]
	if p.caKey, err = parseKey(p.caKeyPEM); err != nil {
		return nil, fmt.Errorf("%s: %w", keyCAKey, err)
	}
	if !publicKeysEqual(p.ca.PublicKey, p.caKey.Public()) {
		return nil, fmt.Errorf("%s does not match the first certificate of %s", keyCAKey, keyCACert)
	}
	cert, err := tls.X509KeyPair(p.leafPEM, p.leafKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", keyTLSCert, keyTLSKey, err)
	}
	p.tls, p.leaf = &cert, cert.Leaf
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok || p.leaf == nil {
		return nil, fmt.Errorf("%s: not a signing key", keyTLSKey)
	}
	p.leafKey = signer
	return p, nil
}

// verify checks that the serving certificate is the current CA's, valid
// at now for every name.
func (p *certPair) verify(names []string, now time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	for _, name := range names {
		_, err := p.leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return err
		}
	}
	return nil
}

// renewAt is two thirds into c's validity.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

func unexpired(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certs {
		if now.Before(c.NotAfter) {
			out = append(out, c)
		}
	}
	return out
}

// newCA makes a CA. Its name carries the time, so that a renewed CA and
// the one it replaces are told apart in a bundle.
func newCA(now time.Time, lifetime time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("allocator-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	cert, err := sign(tmpl, tmpl, key.Public(), key)
	return cert, key, err
}

// newServing makes a serving certificate for names, signed by ca.
func newServing(now time.Time, lifetime time.Duration, names []string, ca *x509.Certificate, caKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate the serving key: %w", err)
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[len(names)-2]},
		DNSNames:    names,
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	cert, err := sign(tmpl, ca, key.Public(), caKey)
	return cert, key, err
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PRIVATE KEY block")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("not a signing key")
	}
	return signer, nil
}

func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return out, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
