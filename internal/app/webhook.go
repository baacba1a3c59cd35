package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/webhook"
)

type webhookOptions struct {
	cluster    clusterFlags
	bind       string
	port       int
	certFile   string
	keyFile    string
	hold       time.Duration
	guardrails apiserver.GuardrailOptions
	namespace  string
	identity   string
	selfSigned selfSignedFlags
	conditions bool
}

// selfSignedFlags are the flags of the self-signed serving certificate,
// used when no certificate files are given.
type selfSignedFlags struct {
	secret, service, configurations string
}

func newWebhookCommand(streams Streams) *cobra.Command {
	o := &webhookOptions{guardrails: apiserver.NewGuardrailOptions()}
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Run the admission webhook that brings scopes, lifecycle and guardrails to a stock kube-apiserver",
		Long: `Run the allocator as an admission webhook in front of kube-apiserver 1.33 or later
(the IPAddress model). It picks each new Service's ClusterIP by the rules of
` + "`allocator serve`" + ` (scoped ServiceCIDRs, never a draining or manual-only range, the
dynamic band first) and sets spec.clusterIP(s); kube-apiserver then allocates
that address as the user's choice, so it is never handed out twice. An address
a user asks for in a draining range, or outside the Service's scope, is refused
with serve's text. ServiceCIDR writes are judged by serve's guardrails
(--service-cidr-* flags) and lifecycle and scope annotations.

It reads IPAddresses, ServiceCIDRs and Namespaces through the API (--kubeconfig,
else the in-cluster config) and serves HTTPS on --bind-address:--secure-port:
` + webhook.ServicesPath + ` (mutating, Services) and ` + webhook.ServiceCIDRsPath + ` (validating,
ServiceCIDRs), /healthz, /readyz and /metrics. The serving certificate is read
again when its files change. Without them, --self-signed-secret keeps a CA and a
serving certificate for --webhook-service in that Secret (created when absent,
shared by the replicas, renewed after two thirds of its life) and sets the
caBundle of --webhook-configurations. deploy/webhook installs it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWebhook(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addKubeFlags(fs)
	fs.StringVar(&o.bind, "bind-address", "0.0.0.0", "address to serve on")
	fs.IntVar(&o.port, "secure-port", 9443, "HTTPS port to serve on")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "serving certificate (PEM), read again when it changes")
	fs.StringVar(&o.keyFile, "tls-private-key-file", "", "serving key (PEM), read again when it changes")
	fs.DurationVar(&o.hold, "hold", webhook.DefaultHold,
		"how long a picked ClusterIP is not picked again while kube-apiserver has not stored its IPAddress")
	fs.StringVar(&o.namespace, "lease-namespace", inClusterNamespace(),
		"namespace of the replicas' member Leases, through which they spread their picks (default: $POD_NAMESPACE, else the service account's); empty: picks anywhere")
	fs.StringVar(&o.identity, "identity", defaultIdentity(), "this replica's name among the replicas (default: $POD_NAME, else the host name)")
	fs.StringVar(&o.selfSigned.secret, "self-signed-secret", "",
		"NAMESPACE/NAME of the Secret holding a self-signed CA and serving certificate, used without --tls-cert-file (created when absent)")
	fs.StringVar(&o.selfSigned.service, "webhook-service", "",
		"NAMESPACE/NAME of the Service kube-apiserver calls the webhook through: the names the self-signed certificate holds")
	fs.StringVar(&o.selfSigned.configurations, "webhook-configurations", "",
		"MUTATING,VALIDATING: the webhook configurations whose caBundle is set to the self-signed CA (either may be empty)")
	fs.BoolVar(&o.conditions, "write-conditions", true,
		"write the ServiceCIDR conditions (capacity, draining, manual-only, overlap) into servicecidrs/status; kube-controller-manager keeps the finalizer and Ready")
	o.guardrails.AddFlags(fs)
	return cmd
}

// servingCertificate is the certificate files' (read again when they
// change), or else the self-signed one kept in --self-signed-secret.
func (o *webhookOptions) servingCertificate(ctx context.Context, client kubernetes.Interface) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if o.certFile != "" {
		cert, err := webhook.LoadCertificate(o.certFile, o.keyFile)
		if err != nil {
			return nil, err
		}
		return cert.GetCertificate, nil
	}
	cfg, err := o.selfSigned.config(client)
	if err != nil {
		return nil, err
	}
	s, err := webhook.StartSelfSigned(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s.GetCertificate, nil
}

// checkCertificateFlags wants the certificate files or --self-signed-secret.
func (o *webhookOptions) checkCertificateFlags() error {
	files := o.certFile != "" || o.keyFile != ""
	switch {
	case files && (o.certFile == "" || o.keyFile == ""):
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	case files && o.selfSigned.secret != "":
		return errors.New("--self-signed-secret is for a serving certificate without --tls-cert-file: give one or the other")
	case !files && o.selfSigned.secret == "":
		return errors.New("--tls-cert-file and --tls-private-key-file, or --self-signed-secret, are required: kube-apiserver calls webhooks over HTTPS")
	case !files:
		_, err := o.selfSigned.config(nil)
		return err
	}
	return nil
}

// config parses the flags into the bootstrap's configuration.
func (f selfSignedFlags) config(client kubernetes.Interface) (webhook.SelfSignedConfig, error) {
	cfg := webhook.SelfSignedConfig{Client: client}
	var err error
	if cfg.Secret, err = objectName(f.secret); err != nil {
		return cfg, fmt.Errorf("--self-signed-secret %w", err)
	}
	if cfg.Service, err = objectName(f.service); err != nil {
		return cfg, fmt.Errorf("--webhook-service %w", err)
	}
	if f.configurations != "" {
		var ok bool
		if cfg.MutatingConfiguration, cfg.ValidatingConfiguration, ok = strings.Cut(f.configurations, ","); !ok || strings.Contains(cfg.ValidatingConfiguration, ",") {
			return cfg, fmt.Errorf("--webhook-configurations %q: want MUTATING,VALIDATING", f.configurations)
		}
	}
	return cfg, nil
}

// objectName parses NAMESPACE/NAME.
func objectName(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// inClusterNamespace is $POD_NAMESPACE, else the namespace of the pod's
// service account, else "".
func inClusterNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// defaultIdentity is $POD_NAME, else the host name.
func defaultIdentity() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	name, _ := os.Hostname()
	return name
}

func runWebhook(ctx context.Context, o *webhookOptions, streams Streams) error {
	if err := o.checkCertificateFlags(); err != nil {
		return &usageError{err}
	}
	guardrails, err := o.guardrails.Guardrails()
	if err != nil {
		return &usageError{err}
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	getCertificate, err := o.servingCertificate(ctx, client)
	if err != nil {
		return err
	}
	w, err := webhook.New(ctx, webhook.Config{Client: client, Hold: o.hold, Namespace: o.namespace, Identity: o.identity, Conditions: o.conditions,
		Policy: servicecidrs.Policy{Guardrails: guardrails, WarnOverlaps: o.guardrails.OverlapWarnings}})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.bind, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           w.Handler(),
		TLSConfig:         &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(streams.Out, "allocator webhook listening on https://%s\n", ln.Addr())
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errCh:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	klog.FromContext(ctx).Info("Stopping the webhook")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	return srv.Shutdown(sctx)
}
