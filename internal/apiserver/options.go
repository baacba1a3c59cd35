package apiserver

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/subrange"
)

// Options are the command-line options of the server. Flag names follow
// kube-apiserver where it has the same option.
type Options struct {
	// ServiceClusterIPRange is one CIDR, or an IPv4 and an IPv6 CIDR separated
	// by a comma (dual-stack; the first is the primary family).
	ServiceClusterIPRange string
	// ServiceNodePortRange is kube-apiserver's --service-node-port-range.
	ServiceNodePortRange string
	SecurePort           int
	BindAddress          string
	// EtcdServers empty means: run an embedded etcd in DataDir.
	EtcdServers []string
	EtcdPrefix  string
	// Etcd{CA,Cert,Key}File secure the connection to --etcd-servers.
	EtcdCAFile   string
	EtcdCertFile string
	EtcdKeyFile  string
	// WatchCacheSizes is --watch-cache-sizes (options_watchcache.go).
	WatchCacheSizes []string
	// EtcdCountMetricPollPeriod is kube-apiserver's
	// --etcd-count-metric-poll-period: how often each resource's objects
	// are counted in etcd (0: never).
	EtcdCountMetricPollPeriod time.Duration
	// EtcdCompactionInterval is kube-apiserver's --etcd-compaction-interval:
	// how often the server compacts etcd's history (0: never).
	EtcdCompactionInterval time.Duration
	// CertDir holds the self-signed serving certificate; default <DataDir>/certs.
	CertDir string
	// DataDir holds the embedded etcd, the certificates and admin.kubeconfig.
	DataDir string
	// Allocator is the ClusterIP allocator model: bitmap or ipaddress.
	Allocator string
	// RepairInterval is the period of the repair controller's full pass.
	RepairInterval time.Duration
	// Guardrails are the --service-cidr-* rules on what ServiceCIDRs may
	// hold (options_guardrails.go).
	Guardrails GuardrailOptions
	// Security are the serving certificate, authentication, authorization,
	// audit and profiling options (options_security.go).
	Security *SecurityOptions
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		ServiceClusterIPRange:     "10.96.0.0/16",
		ServiceNodePortRange:      nodeport.Default,
		SecurePort:                6443,
		BindAddress:               "127.0.0.1",
		EtcdPrefix:                etcdlayout.DefaultPrefix,
		WatchCacheSizes:           slices.Clone(DefaultWatchCacheSizes),
		EtcdCountMetricPollPeriod: DefaultCountMetricPollPeriod,
		EtcdCompactionInterval:    DefaultCompactionInterval,
		DataDir:                   "./allocator-data",
		Allocator:                 string(model.IPAddress),
		RepairInterval:            repair.DefaultInterval,
		Security:                  NewSecurityOptions(),
		Guardrails:                NewGuardrailOptions(),
	}
}

// AddFlags registers the options on fs (every section of Flags).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fss := o.Flags()
	for _, name := range fss.Order {
		fs.AddFlagSet(fss.FlagSets[name])
	}
}

// Flags returns the options' flags in named sections, the way
// kube-apiserver's help shows them: what an operator sets first (the
// ranges and the model) first, audit and profiling last.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("allocation")
	fs.StringVar(&o.ServiceClusterIPRange, "service-cluster-ip-range", o.ServiceClusterIPRange,
		"CIDR range from which to assign service cluster IPs; an IPv4 and an IPv6 CIDR separated by a comma make the cluster dual-stack.")
	fs.StringVar(&o.ServiceNodePortRange, "service-node-port-range", o.ServiceNodePortRange,
		"A port range to reserve for services with NodePort visibility, e.g. '30000-32767' or '30000+2767'. Inclusive at both ends of the range.")
	fs.StringVar(&o.Allocator, "allocator", o.Allocator, "ClusterIP allocator model: ipaddress (IPAddress objects over ServiceCIDRs) or bitmap (one RangeAllocation per family). Data written under the other model is carried over at start.")
	fs.DurationVar(&o.RepairInterval, "repair-interval", o.RepairInterval, "Period of the ClusterIP repair controller's full pass; must be positive.")
	o.Guardrails.addFlags(&fss)

	fs = fss.FlagSet("serving")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "The port on which to serve HTTPS (0 picks a free port).")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "The IP address on which to listen for the --secure-port port.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the embedded etcd, certificates and admin.kubeconfig.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir,
		"The directory where the self-signed TLS certificate is kept (default <data-dir>/certs).")

	fs = fss.FlagSet("etcd")
	fs.StringSliceVar(&o.EtcdServers, "etcd-servers", o.EtcdServers,
		"List of etcd servers to connect with (scheme://ip:port), comma separated. Empty: run an embedded etcd in --data-dir.")
	fs.StringVar(&o.EtcdPrefix, "etcd-prefix", o.EtcdPrefix, "The prefix to prepend to all resource paths in etcd.")
	fs.StringVar(&o.EtcdCAFile, "etcd-cafile", o.EtcdCAFile, "SSL Certificate Authority file used to secure etcd communication (with --etcd-servers).")
	fs.StringVar(&o.EtcdCertFile, "etcd-certfile", o.EtcdCertFile, "SSL certification file used to secure etcd communication (with --etcd-servers).")
	fs.StringVar(&o.EtcdKeyFile, "etcd-keyfile", o.EtcdKeyFile, "SSL key file used to secure etcd communication (with --etcd-servers).")
	fs.DurationVar(&o.EtcdCountMetricPollPeriod, "etcd-count-metric-poll-period", o.EtcdCountMetricPollPeriod,
		"Frequency of polling etcd for number of resources per type. 0 disables the metric collection. "+
			"The Services and IPAddresses are counted in the server's informers; each poll of another resource walks etcd's index over every one of its keys.")
	fs.DurationVar(&o.EtcdCompactionInterval, "etcd-compaction-interval", o.EtcdCompactionInterval,
		"The interval of compaction requests. If 0, the compaction request from apiserver is disabled. "+
			"Each compacts etcd's history to the revision of the interval before, no further than a paged list in progress on any server reads (for up to 10 minutes).")
	fs.StringSliceVar(&o.WatchCacheSizes, "watch-cache-sizes", o.WatchCacheSizes,
		"Watch cache per resource, as kube-apiserver's flag: RESOURCE[.GROUP]#SIZE, comma separated; a size of 0 serves the resource from etcd without one, any other size with one. "+
			"By default the Services and IPAddresses have none: the server's own informers hold them already, and the cache would hold a second copy. "+
			"Many watchers of Services (every node's kube-proxy) want it back: services#100.")

	o.Security.addFlags(&fss)
	return fss
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	// The ranges are checked against the model's rules once the model is
	// known; an unknown --allocator is refused below.
	name, nameErr := model.Parse(o.Allocator, false)
	guardrails, guardrailsErr := o.Guardrails.Guardrails()
	errs = append(errs, guardrailsErr)
	if _, err := ParseWatchCacheSizes(o.WatchCacheSizes); err != nil {
		errs = append(errs, err)
	}
	if cidrs, err := ParseServiceCIDRs(o.ServiceClusterIPRange); err != nil {
		errs = append(errs, err)
	} else {
		if nameErr == nil {
			errs = append(errs, checkRangeForModel(cidrs, name)...)
		}
		if guardrailsErr == nil {
			errs = append(errs, checkDefaultRange(guardrails, cidrs)...)
		}
	}
	if _, err := nodeport.Parse(o.ServiceNodePortRange); err != nil {
		errs = append(errs, fmt.Errorf("--service-node-port-range: %w", err))
	}
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d must be between 0 and 65535", o.SecurePort))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", o.BindAddress))
	}
	if err := CheckEtcdServers(o.EtcdServers); err != nil {
		errs = append(errs, err)
	}
	if !strings.HasPrefix(o.EtcdPrefix, "/") {
		errs = append(errs, fmt.Errorf("--etcd-prefix %q must start with /", o.EtcdPrefix))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if o.EtcdCountMetricPollPeriod < 0 {
		errs = append(errs, fmt.Errorf("--etcd-count-metric-poll-period %v: must not be negative (0 turns the count off)", o.EtcdCountMetricPollPeriod))
	}
	if o.EtcdCompactionInterval < 0 {
		errs = append(errs, fmt.Errorf("--etcd-compaction-interval %v: must not be negative (0 turns the compaction off)", o.EtcdCompactionInterval))
	}
	if o.RepairInterval <= 0 {
		errs = append(errs, fmt.Errorf("--repair-interval %v: must be a positive duration such as 30s or 3m (the repair controller cannot be turned off)", o.RepairInterval))
	}
	if nameErr != nil {
		errs = append(errs, fmt.Errorf("--allocator %q: must be %s or %s", o.Allocator, model.Bitmap, model.IPAddress))
	}
	errs = append(errs, o.etcdTLS().validate()...)
	errs = append(errs, o.Security.Validate()...)
	return errors.Join(errs...)
}

// CheckEtcdServers checks the URLs of --etcd-servers (serve's and the jobs'):
// each has a scheme etcd's client dials (http, https, or unix and unixs for
// a socket) and a host, as kube-apiserver's flag documents. A bare host:port
// is refused at once because it leaves the client guessing whether to speak
// TLS (it does only when certificates are given): a TLS etcd reached that way
// is waited for until the probe's timeout, then reported as not answering.
func CheckEtcdServers(servers []string) error {
	var errs []error
	for _, s := range servers {
		if err := checkEtcdServer(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkEtcdServer(s string) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("--etcd-servers %q: empty entry; give URLs separated by commas, such as https://127.0.0.1:2379", s)
	}
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return fmt.Errorf("--etcd-servers %s: missing scheme; use http://%s or https://%s", s, s, s)
	}
	switch scheme {
	case "http", "https", "unix", "unixs":
	default:
		return fmt.Errorf("--etcd-servers %s: scheme %q; use http:// or https://", s, scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error repeats the whole value; the entry is named once.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return fmt.Errorf("--etcd-servers %s: %w", s, err)
	}
	if u.Host == "" && (scheme == "http" || scheme == "https") {
		return fmt.Errorf("--etcd-servers %s: no host; use %s://HOST:PORT", s, scheme)
	}
	return nil
}

// certDir returns the certificate directory.
func (o *Options) certDir() string {
	if o.CertDir != "" {
		return o.CertDir
	}
	return filepath.Join(o.DataDir, "certs")
}

// ParseServiceCIDRs parses --service-cluster-ip-range: one canonical CIDR, or
// two of different families.
func ParseServiceCIDRs(value string) ([]netip.Prefix, error) {
	parts := strings.Split(value, ",")
	if value == "" || len(parts) > 2 {
		return nil, fmt.Errorf("--service-cluster-ip-range %q: want one CIDR or two (IPv4 and IPv6) separated by a comma", value)
	}
	var out []netip.Prefix
	for _, part := range parts {
		prefix, err := subrange.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--service-cluster-ip-range: %w", err)
		}
		out = append(out, prefix)
	}
	if len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("--service-cluster-ip-range %q: a dual-stack range needs one IPv4 and one IPv6 CIDR", value)
	}
	return out, nil
}

// checkRangeForModel refuses ranges the allocator model cannot serve: too
// large for the model (as kube-apiserver's flag checks) or without any
// usable address.
func checkRangeForModel(cidrs []netip.Prefix, name model.Name) []error {
	var errs []error
	for _, prefix := range cidrs {
		r, err := ipallocator.ServiceRange(name, prefix)
		var flagErr *ipallocator.FlagRangeError
		switch {
		case errors.As(err, &flagErr):
			errs = append(errs, fmt.Errorf("--service-cluster-ip-range %w", err))
		case err != nil:
			errs = append(errs, fmt.Errorf("--service-cluster-ip-range: %w", err))
		case r.Size() == 0:
			errs = append(errs, fmt.Errorf("--service-cluster-ip-range %s has no usable address", prefix))
		}
	}
	return errs
}
