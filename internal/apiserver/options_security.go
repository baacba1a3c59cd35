package apiserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"
)

// SecurityOptions are the options that let the server run beside a real
// control plane, under kube-apiserver's flag names: the serving certificate
// (--tls-cert-file, --tls-private-key-file), who may call it (--client-ca-file,
// --token-auth-file, --authentication-kubeconfig for TokenReview,
// --requestheader-*), who may do what (--authorization-kubeconfig for
// SubjectAccessReview), the audit log (--audit-*), and --profiling. All
// empty is the zero-config server: self-signed certificate, the generated
// admin token only, every authenticated user allowed everything.
type SecurityOptions struct {
	// TLSCertFile and TLSPrivateKeyFile replace the self-signed serving
	// certificate; the admin kubeconfig then trusts TLSCertFile's bundle.
	TLSCertFile       string
	TLSPrivateKeyFile string
	// TokenAuthFile is a kube-apiserver static token file (CSV: token, user,
	// uid, "group1,group2").
	TokenAuthFile string
	// Authentication is k8s.io/apiserver's delegated authentication:
	// x509 client certificates (--client-ca-file), TokenReview against
	// --authentication-kubeconfig, and the front-proxy headers.
	Authentication *genericoptions.DelegatingAuthenticationOptions
	// Authorization is k8s.io/apiserver's delegated authorization:
	// SubjectAccessReview against --authorization-kubeconfig.
	Authorization *genericoptions.DelegatingAuthorizationOptions
	// Audit is k8s.io/apiserver's audit log and webhook.
	Audit *genericoptions.AuditOptions
	// Features are --profiling, --contention-profiling, --debug-socket-path.
	Features *genericoptions.FeatureOptions
}

// NewSecurityOptions returns the defaults: nothing beyond the zero-config
// server.
func NewSecurityOptions() *SecurityOptions {
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	// Without --authentication-kubeconfig nothing is looked up: not the
	// in-cluster config's ConfigMap, and no warning that it is missing.
	authn.RemoteKubeConfigFileOptional = true
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFileOptional = true
	features := genericoptions.NewFeatureOptions()
	// Priority and fairness needs the flowcontrol API, which we do not serve.
	features.EnablePriorityAndFairness = false
	return &SecurityOptions{
		Authentication: authn,
		Authorization:  authz,
		Audit:          genericoptions.NewAuditOptions(),
		Features:       features,
	}
}

// addFlags registers the options in fss: serving certificate and the
// authentication, authorization, audit and profiling sections.
func (o *SecurityOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("serving")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile,
		"File containing the default x509 serving certificate (with intermediates after it). Empty: a self-signed certificate in --cert-dir.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile,
		"File containing the x509 private key matching --tls-cert-file.")
	fs = fss.FlagSet("authentication")
	fs.StringVar(&o.TokenAuthFile, "token-auth-file", o.TokenAuthFile,
		"If set, the file that will be used to secure the secure port of the API server via token authentication (CSV: token,user,uid,\"group1,group2\").")
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.Audit.AddFlags(fss.FlagSet("audit"))
	// Only the profiling flags: --enable-priority-and-fairness would need
	// the flowcontrol API.
	features := pflag.NewFlagSet("features", pflag.ContinueOnError)
	o.Features.AddFlags(features)
	fs = fss.FlagSet("profiling")
	features.VisitAll(func(f *pflag.Flag) {
		if f.Name != "enable-priority-and-fairness" {
			fs.AddFlag(f)
		}
	})
}

// Validate checks every file the options name, so a typo, an unreadable
// file or a certificate that does not match its key is one line at start,
// before anything listens.
func (o *SecurityOptions) Validate() []error {
	var errs []error
	switch {
	case (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == ""):
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file must be given together"))
	case o.TLSCertFile != "":
		if _, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSPrivateKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert-file %s, --tls-private-key-file %s: %w", o.TLSCertFile, o.TLSPrivateKeyFile, oneLine(err)))
		}
	}
	if err := checkCAFile("--client-ca-file", o.Authentication.ClientCert.ClientCA); err != nil {
		errs = append(errs, err)
	}
	if err := checkCAFile("--requestheader-client-ca-file", o.Authentication.RequestHeader.ClientCAFile); err != nil {
		errs = append(errs, err)
	}
	if o.TokenAuthFile != "" {
		if _, err := tokenfile.NewCSV(o.TokenAuthFile); err != nil {
			errs = append(errs, fmt.Errorf("--token-auth-file: %w", oneLine(err)))
		}
	}
	for _, kc := range []struct{ flag, path string }{
		{"--authentication-kubeconfig", o.Authentication.RemoteKubeConfigFile},
		{"--authorization-kubeconfig", o.Authorization.RemoteKubeConfigFile},
	} {
		if kc.path == "" {
			continue
		}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kc.path}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err == nil {
			_, err = kubernetes.NewForConfig(cfg)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", kc.flag, kc.path, oneLine(err)))
		}
	}
	if o.Audit.PolicyFile != "" {
		if _, err := policy.LoadPolicyFromFile(o.Audit.PolicyFile); err != nil {
			errs = append(errs, fmt.Errorf("--audit-policy-file: %w", oneLine(err)))
		}
	}
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	return errs
}

// Warnings are settings that are valid but likely not what the operator
// meant; serve prints each at start-up.
func (o *SecurityOptions) Warnings() []string {
	var out []string
	if o.Audit.LogOptions.Path != "" && o.Audit.PolicyFile == "" {
		out = append(out, "--audit-log-path is set without --audit-policy-file: no audit event is recorded (as on kube-apiserver); "+
			"give a policy, e.g. deploy/examples/audit-policy.yaml")
	}
	if w := o.unauthorizedWarning(); w != "" {
		out = append(out, w)
	}
	return out
}

// unauthorizedWarning is the warning of a server that authenticates
// identities other than the generated admin (a token file, client
// certificates, TokenReview, a front proxy) and lets each of them do
// everything, because no --authorization-kubeconfig asks the cluster's
// RBAC; "" otherwise.
func (o *SecurityOptions) unauthorizedWarning() string {
	if o.Authorization.RemoteKubeConfigFile != "" {
		return ""
	}
	var sources []string
	for _, f := range []struct{ flag, value string }{
		{"--token-auth-file", o.TokenAuthFile},
		{"--client-ca-file", o.Authentication.ClientCert.ClientCA},
		{"--authentication-kubeconfig", o.Authentication.RemoteKubeConfigFile},
		{"--requestheader-client-ca-file", o.Authentication.RequestHeader.ClientCAFile},
	} {
		if f.value != "" {
			sources = append(sources, f.flag)
		}
	}
	if len(sources) == 0 {
		return ""
	}
	return fmt.Sprintf("--authorization-kubeconfig is not set: every identity that %s authenticates may do everything on this server "+
		"(delete any Service, default/kubernetes included, and any ServiceCIDR or IPAddress), as under kube-apiserver's AlwaysAllow; "+
		"give --authorization-kubeconfig so that the cluster's RBAC decides (SubjectAccessReview; deploy/serve-rbac.yaml)",
		strings.Join(sources, ", "))
}

// checkCAFile checks that path, when set, holds at least one PEM certificate.
func checkCAFile(flag, path string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if _, err := certutil.ParseCertsPEM(data); err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, oneLine(err))
	}
	return nil
}

// delegatedAuthentication reports whether any delegated authentication
// source is configured.
func (o *SecurityOptions) delegatedAuthentication() bool {
	a := o.Authentication
	return a.ClientCert.ClientCA != "" || a.RemoteKubeConfigFile != "" || a.RequestHeader.ClientCAFile != ""
}

// applyServing points the serving options at --tls-cert-file and
// --tls-private-key-file (which turns off the self-signed certificate).
func (o *SecurityOptions) applyServing(serving *genericoptions.SecureServingOptionsWithLoopback) {
	serving.ServerCert.CertKey.CertFile = o.TLSCertFile
	serving.ServerCert.CertKey.KeyFile = o.TLSPrivateKeyFile
}

// applyAuth sets the authenticator and authorizer of gc. adminToken is the
// generated admin's token, accepted in every configuration.
func (o *SecurityOptions) applyAuth(gc *genericapiserver.Config, adminToken string) error {
	extra := []authenticator.Request{}
	if o.TokenAuthFile != "" {
		tokens, err := tokenfile.NewCSV(o.TokenAuthFile)
		if err != nil {
			return fmt.Errorf("--token-auth-file: %w", oneLine(err))
		}
		extra = append(extra, bearertoken.New(tokens))
	}
	if o.delegatedAuthentication() {
		authn := *o.Authentication
		// The ConfigMap lookup needs the kubeconfig; without it there is
		// nothing to look up (and the library would warn at every start).
		authn.SkipInClusterLookup = authn.SkipInClusterLookup || authn.RemoteKubeConfigFile == ""
		// ApplyTo also sets the serving TLS's client CAs (so clients are
		// asked for certificates) and the front-proxy header config.
		if err := authn.ApplyTo(&gc.Authentication, gc.SecureServing, gc.OpenAPIConfig); err != nil {
			return fmt.Errorf("delegated authentication: %w", oneLine(err))
		}
		extra = append(extra, withoutAnonymous{gc.Authentication.Authenticator})
	}
	gc.Authentication.Authenticator = newAuthenticator(adminToken, extra...)

	limiter := anonymousLimiter{}
	if o.Authorization.RemoteKubeConfigFile != "" {
		var info genericapiserver.AuthorizationInfo
		if err := o.Authorization.ApplyTo(&info); err != nil {
			return fmt.Errorf("delegated authorization: %w", oneLine(err))
		}
		limiter.delegate = info.Authorizer
	}
	gc.Authorization.Authorizer = limiter
	return nil
}

// applyAudit and applyFeatures are the library's wiring as is.
func (o *SecurityOptions) applyAudit(gc *genericapiserver.Config) error {
	if err := o.Audit.ApplyTo(gc); err != nil {
		return fmt.Errorf("audit: %w", oneLine(err))
	}
	return nil
}

func (o *SecurityOptions) applyFeatures(gc *genericapiserver.Config) error {
	if err := o.Features.ApplyTo(gc, nil, nil); err != nil {
		return fmt.Errorf("features: %w", oneLine(err))
	}
	return nil
}

// oneLine keeps an error on one line: a start-up failure is reported as
// one line, and some library errors (YAML decoding, joined errors) span
// several.
func oneLine(err error) error {
	if err == nil || !strings.ContainsAny(err.Error(), "\r\n") {
		return err
	}
	return lineError{err}
}

type lineError struct{ err error }

func (e lineError) Error() string {
	return strings.Join(strings.Fields(strings.ReplaceAll(e.err.Error(), "\n", "; ")), " ")
}
func (e lineError) Unwrap() error { return e.err }
