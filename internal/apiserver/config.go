package apiserver

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/allocator/allocator/internal/listhold"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	generatedopenapi "github.com/allocator/allocator/pkg/generated/openapi"
	"github.com/allocator/allocator/pkg/model"
)

// defaultRestoreCheckInterval is how often the server advances its restore
// marker: one compare-and-swap per interval.
const defaultRestoreCheckInterval = time.Second

// Config is the server's configuration; build it with Options.Config, adjust
// it, then Complete it.
type Config struct {
	// Generic is the k8s.io/apiserver configuration (serving, auth, OpenAPI).
	Generic *genericapiserver.Config
	// ServiceCIDRs are the cluster's service ranges, primary family first.
	ServiceCIDRs []netip.Prefix
	// NodePortRange is --service-node-port-range (zero: the default
	// 30000-32767). Node ports always use the bitmap map at
	// <EtcdPrefix>/ranges/servicenodeports, whatever Model is.
	NodePortRange nodeport.Range
	// EtcdServers are the etcd client URLs. Required.
	EtcdServers []string
	// EtcdPrefix is prepended to every key, e.g. "/registry".
	EtcdPrefix string
	// EtcdTLS secures the connection to EtcdServers (empty: plain http).
	EtcdTLS EtcdTLS
	// InProcessEtcd, when set, is the etcd member of EtcdServers running in
	// this process (serve's embedded etcd): the server's stores and
	// allocators then call it in process, without gRPC and TLS over
	// loopback. EtcdServers stay what the etcd health checks probe and what
	// other processes (repair, migrate) are told to use. The member must
	// outlive the server's Run.
	InProcessEtcd InProcessEtcd
	// WarmStart, when set, carries the Service and IPAddress informers'
	// stores across a clean restart (LoadWarmStart): serve sets it for its
	// embedded etcd.
	WarmStart *WarmStart
	// Model is the ClusterIP allocator model (--allocator); internal/ipallocator
	// builds it.
	Model model.Name
	// InMemory keeps the bitmap model's maps in memory instead of etcd: not
	// shared between replicas, lost on restart, nothing to repair, no
	// transition. Such a server must set RebuildAllocations. For tests.
	InMemory bool
	// WrapAllocator, if set, wraps each family's allocator before the server
	// uses it (tests slow it down or hold it unready). The repairs still see
	// the model's stored maps.
	WrapAllocator func(allocation.Interface) allocation.Interface
	// RebuildAllocations re-marks the cluster IPs of every stored Service in
	// the allocators before the server reports ready. Needed for allocators
	// that keep no state of their own (InMemory); harmless for others
	// (already-allocated addresses are skipped).
	RebuildAllocations bool
	// ServerURL is the https URL clients use.
	ServerURL string
	// KubeconfigPath is where the admin kubeconfig was written.
	KubeconfigPath string
	// CountMetricPollPeriod is how often the registry counts each
	// resource's objects in etcd, for apiserver_resource_objects (and the
	// deprecated apiserver_storage_objects): 0 means
	// DefaultCountMetricPollPeriod, negative never. A list presized from
	// the count reads it itself when no poll has for 90 s.
	CountMetricPollPeriod time.Duration
	// CompactionInterval is how often the server compacts etcd's history,
	// to the revision of the interval before, as kube-apiserver's
	// --etcd-compaction-interval: 0 means DefaultCompactionInterval,
	// negative never.
	CompactionInterval time.Duration
	// ListHoldLimits bound how long a paged list holds etcd's compaction
	// back (internal/listhold; a zero limit: listhold.DefaultIdle or DefaultMaxAge).
	ListHoldLimits listhold.Limits
	// RepairInterval is the period of the repair controller's full pass
	// (0: repair.DefaultInterval, applied by repair.Options.WithDefaults).
	RepairInterval time.Duration
	// ServiceCIDRGuardrails refuse ServiceCIDRs outside the operator's
	// rules (the --service-cidr-* flags); the zero value refuses none.
	ServiceCIDRGuardrails servicecidrs.Guardrails
	// ServiceCIDROverlapWarnings: --service-cidr-overlap-warnings.
	ServiceCIDROverlapWarnings bool
	// ManualRepair keeps the repair controller and the start-up carry-over
	// from the other model from running, for tests that drive them.
	ManualRepair bool
	// RestoreCheckInterval is how often the server advances its restore
	// marker (internal/etcdhistory); default 1 s. A restore is found within one
	// interval of etcd answering, and every write after a restore to a
	// point before the last advance is refused.
	RestoreCheckInterval time.Duration
	// KubernetesServicePort is the target port of the default/kubernetes Service.
	KubernetesServicePort int
	// WriteLeaseTTL is the life of the etcd leases the server's fenced
	// Service writes carry (default allocation.WriteLease): a write whose
	// answer was lost can land until its lease ends. Tests shorten it.
	WriteLeaseTTL time.Duration
	// RepairGrace is the repairs' leak and orphan grace (default
	// allocation.LeakGrace, which outlasts every request). Tests shorten it.
	RepairGrace time.Duration
	// NoWatchCache are the resources served without a watch cache
	// (--watch-cache-sizes RESOURCE#0): their lists, gets and watches read
	// etcd. By default the Services and IPAddresses, which the server's
	// own informers hold already (options_watchcache.go).
	NoWatchCache map[schema.GroupResource]bool
	// TransitionTTL is the lease TTL of this replica's transition record
	// (default transition.DefaultTTL). An InMemory server joins no
	// transition.
	TransitionTTL time.Duration
}

// Config turns the options into a Config: it creates the data directory,
// opens the listener, generates (once) the self-signed certificate and the
// admin token, and writes <data-dir>/admin.kubeconfig (mode 0600).
// etcdServers overrides o.EtcdServers (the embedded etcd's endpoints).
func (o *Options) Config(etcdServers []string) (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cidrs, _ := ParseServiceCIDRs(o.ServiceClusterIPRange)
	nodePorts, _ := nodeport.Parse(o.ServiceNodePortRange)
	allocatorModel, _ := model.Parse(o.Allocator, false)
	guardrails, _ := o.Guardrails.Guardrails()
	noWatchCache, _ := ParseWatchCacheSizes(o.WatchCacheSizes)
	if len(etcdServers) == 0 {
		etcdServers = o.EtcdServers
	}
	if len(etcdServers) == 0 {
		return nil, fmt.Errorf("no etcd servers")
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}

	gc := genericapiserver.NewConfig(Codecs)
	// /metrics is served by the server itself, from the global registry plus
	// its own (allocator and repair metrics; several servers may share a
	// process in tests).
	gc.EnableMetrics = false
	gc.EffectiveVersion = newEffectiveVersion()

	setOpenAPIConfig(gc)
	listener, host, port, err := o.applySecureServing(gc)
	if err != nil {
		return nil, err
	}
	serverURL := "https://" + net.JoinHostPort(host, strconv.Itoa(port))
	gc.PublicAddress = net.ParseIP(host)
	gc.ExternalAddress = net.JoinHostPort(host, strconv.Itoa(port))

	kubeconfig := filepath.Join(o.DataDir, "admin.kubeconfig")
	if err := o.applyAdminAccess(gc, kubeconfig, serverURL); err != nil {
		listener.Close()
		return nil, err
	}

	// The server's own clients (informers, bootstrap, repair) talk to it
	// over loopback: gzip there only costs CPU on both ends (every watch
	// event would be compressed per flush, about 5% of the server's CPU
	// while creating Services).
	gc.LoopbackClientConfig.DisableCompression = true

	cfg := &Config{
		Generic:                    gc,
		ServiceCIDRs:               cidrs,
		NodePortRange:              nodePorts,
		EtcdServers:                etcdServers,
		EtcdPrefix:                 o.EtcdPrefix,
		EtcdTLS:                    o.etcdTLS(),
		Model:                      allocatorModel,
		RepairInterval:             o.RepairInterval,
		ServiceCIDRGuardrails:      guardrails,
		ServiceCIDROverlapWarnings: o.Guardrails.OverlapWarnings,
		ServerURL:                  serverURL,
		KubeconfigPath:             kubeconfig,
		KubernetesServicePort:      port,
		NoWatchCache:               noWatchCache,
		CountMetricPollPeriod:      countPollPeriod(o.EtcdCountMetricPollPeriod),
		CompactionInterval:         compactionInterval(o.EtcdCompactionInterval),
	}
	return cfg, nil
}

// setOpenAPIConfig makes gc serve the OpenAPI v2 and v3 documents of the
// generated definitions.
func setOpenAPIConfig(gc *genericapiserver.Config) {
	namer := openapinamer.NewDefinitionNamer(OpenAPIScheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIConfig.Info.Title = "allocator"
	gc.OpenAPIConfig.Info.Version = "v1"
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIV3Config.Info.Title = "allocator"
	gc.OpenAPIV3Config.Info.Version = "v1"
}

// applySecureServing opens the listener and sets gc's secure serving and
// loopback client, with a self-signed certificate generated once unless
// one is configured. It returns the listener, closed on error, and the
// host and port clients reach the server at.
func (o *Options) applySecureServing(gc *genericapiserver.Config) (listener net.Listener, host string, port int, err error) {
	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = net.ParseIP(o.BindAddress)
	serving.ServerCert.CertDirectory = o.certDir()
	serving.ServerCert.PairName = "apiserver"
	o.Security.applyServing(serving)
	listener, port, err = genericoptions.CreateListener("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)), net.ListenConfig{})
	if err != nil {
		return nil, "", 0, fmt.Errorf("listen on %s:%d: %w", o.BindAddress, o.SecurePort, err)
	}
	serving.Listener, serving.BindPort = listener, port
	host = o.BindAddress
	if ip := net.ParseIP(host); ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	if err := serving.MaybeDefaultWithSelfSignedCerts(host, []string{"localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}); err != nil {
		listener.Close()
		return nil, "", 0, fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := serving.ApplyTo(&gc.SecureServing, &gc.LoopbackClientConfig); err != nil {
		listener.Close()
		return nil, "", 0, fmt.Errorf("secure serving: %w", err)
	}
	return listener, host, port, nil
}

// applyAdminAccess writes the admin kubeconfig (generating its token once)
// and sets gc's authentication, authorization, audit and feature gates.
func (o *Options) applyAdminAccess(gc *genericapiserver.Config, kubeconfig, serverURL string) error {
	caFile := filepath.Join(o.certDir(), "apiserver.crt")
	if o.Security.TLSCertFile != "" {
		// Go clients accept a certificate found in their roots, so the
		// serving bundle itself is what the admin kubeconfig trusts.
		caFile = o.Security.TLSCertFile
	}
	token, err := ensureAdminKubeconfig(kubeconfig, serverURL, caFile)
	if err != nil {
		return err
	}
	// Without --authorization-kubeconfig every authenticated user is an
	// administrator; anonymous requests may only read the probes and
	// /version (anonymous.go).
	for _, apply := range []func() error{
		func() error { return o.Security.applyAuth(gc, token) },
		func() error { return o.Security.applyAudit(gc) },
		func() error { return o.Security.applyFeatures(gc) },
	} {
		if err := apply(); err != nil {
			return err
		}
	}
	return nil
}

// completedConfig is a Config whose defaults are filled in.
type completedConfig struct {
	*Config
	generic genericapiserver.CompletedConfig
}

// CompletedConfig can only be obtained from Config.Complete, so nobody builds
// a server from a config whose defaults are missing.
type CompletedConfig struct {
	*completedConfig
}

// Complete fills in defaults.
func (c *Config) Complete() CompletedConfig {
	if c.NodePortRange.IsZero() {
		c.NodePortRange = nodeport.MustParse(nodeport.Default)
	}
	if c.Model == "" {
		c.Model = model.IPAddress
	}
	if c.RestoreCheckInterval <= 0 {
		c.RestoreCheckInterval = defaultRestoreCheckInterval
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = etcdlayout.DefaultPrefix
	}
	if c.KubernetesServicePort == 0 {
		c.KubernetesServicePort = 6443
	}
	return CompletedConfig{&completedConfig{Config: c, generic: c.Generic.Complete(nil)}}
}
