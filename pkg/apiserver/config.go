package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	restclient "k8s.io/client-go/rest"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	generatedopenapi "github.com/allocator/allocator/pkg/generated/openapi"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/portrange"
	"github.com/allocator/allocator/pkg/report"
	"github.com/allocator/allocator/pkg/subrange"
	"github.com/allocator/allocator/pkg/transition"
)

// AllocatorSpec describes the allocator the server needs for one IP family.
type AllocatorSpec struct {
	// Prefix is the family's service CIDR from --service-cluster-ip-range.
	Prefix netip.Prefix
	// Primary is true for the cluster's first family. In the bitmap model the
	// primary family lives at <EtcdPrefix>/ranges/serviceips, the other at
	// <EtcdPrefix>/ranges/secondaryserviceips.
	Primary bool
	// Model is ModelBitmap or ModelIPAddress (--allocator).
	Model model.Name
	// Etcd is a client on the server's etcd; the server owns and closes it.
	Etcd *clientv3.Client
	// EtcdPrefix is --etcd-prefix, e.g. "/registry".
	EtcdPrefix string
	// Loopback is a client config with full rights on this server (the
	// IPAddress model creates IPAddress objects through it). The server is
	// not serving yet when the factory runs.
	Loopback *restclient.Config
	// Transition is the replica's membership in the model transition
	// (pkg/transition); nil for allocators that keep no stored state.
	Transition *transition.Coordinator
}

// RangeKey returns the bitmap model's etcd key for spec's family.
func (s AllocatorSpec) RangeKey() string {
	if s.Primary {
		return s.EtcdPrefix + "/ranges/serviceips"
	}
	return s.EtcdPrefix + "/ranges/secondaryserviceips"
}

// AllocatorFactory builds the allocator of one IP family. It is called once
// per family when the server is created.
type AllocatorFactory func(ctx context.Context, spec AllocatorSpec) (allocation.Interface, error)

// MemoryBitmapFactory builds in-memory bitmap allocators. They are not shared
// between replicas and lose their state on restart, so a server using them
// must set Config.RebuildAllocations.
func MemoryBitmapFactory(_ context.Context, spec AllocatorSpec) (allocation.Interface, error) {
	rng, err := subrange.New(spec.Prefix, subrange.ModelBitmap)
	if err != nil {
		return nil, fmt.Errorf("service range %s: %w", spec.Prefix, err)
	}
	return bitmap.NewAllocator(rng)
}

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
	NodePortRange portrange.Range
	// EtcdServers are the etcd client URLs. Required.
	EtcdServers []string
	// EtcdPrefix is prepended to every key, e.g. "/registry".
	EtcdPrefix string
	// EtcdTLS secures the connection to EtcdServers (empty: plain http).
	EtcdTLS EtcdTLS
	// Model is the allocator model passed to NewAllocator.
	Model model.Name
	// NewAllocator builds each family's allocator. Nil means, by Model:
	// EtcdBitmapFactory (bitmap) or IPAddressFactory (ipaddress).
	NewAllocator AllocatorFactory
	// RebuildAllocations re-marks the cluster IPs of every stored Service in
	// the allocators before the server reports ready. Needed for allocators
	// that keep no state of their own (MemoryBitmapFactory); harmless for
	// others (already-allocated addresses are skipped).
	RebuildAllocations bool
	// ServerURL is the https URL clients use.
	ServerURL string
	// KubeconfigPath is where the admin kubeconfig was written.
	KubeconfigPath string
	// RepairInterval is the period of the repair controller's full pass.
	RepairInterval time.Duration
	// ManualRepair keeps the repair controller and the start-up carry-over
	// from the other model from running, for tests that drive them.
	ManualRepair bool
	// KubernetesServicePort is the target port of the default/kubernetes Service.
	KubernetesServicePort int
	// joinTransition is set by Complete when the allocators are the default,
	// etcd-backed ones.
	joinTransition bool
	// TransitionTTL is the lease TTL of this replica's transition record
	// (default transition.DefaultTTL). The transition is joined only with
	// the default allocator factories (NewAllocator nil).
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
	nodePorts, _ := portrange.Parse(o.ServiceNodePortRange)
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

	namer := openapinamer.NewDefinitionNamer(OpenAPIScheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIConfig.Info.Title = "allocator"
	gc.OpenAPIConfig.Info.Version = "v1"
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIV3Config.Info.Title = "allocator"
	gc.OpenAPIV3Config.Info.Version = "v1"

	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = net.ParseIP(o.BindAddress)
	serving.ServerCert.CertDirectory = o.certDir()
	serving.ServerCert.PairName = "apiserver"
	o.Security.applyServing(serving)
	listener, port, err := genericoptions.CreateListener("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)), net.ListenConfig{})
	if err != nil {
		return nil, fmt.Errorf("listen on %s:%d: %w", o.BindAddress, o.SecurePort, err)
	}
	serving.Listener, serving.BindPort = listener, port
	host := o.BindAddress
	if ip := net.ParseIP(host); ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	if err := serving.MaybeDefaultWithSelfSignedCerts(host, []string{"localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}); err != nil {
		listener.Close()
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := serving.ApplyTo(&gc.SecureServing, &gc.LoopbackClientConfig); err != nil {
		listener.Close()
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	serverURL := "https://" + net.JoinHostPort(host, strconv.Itoa(port))
	gc.PublicAddress = net.ParseIP(host)
	gc.ExternalAddress = net.JoinHostPort(host, strconv.Itoa(port))

	kubeconfig := filepath.Join(o.DataDir, "admin.kubeconfig")
	caFile := filepath.Join(o.certDir(), "apiserver.crt")
	if o.Security.TLSCertFile != "" {
		// Go clients accept a certificate found in their roots, so the
		// serving bundle itself is what the admin kubeconfig trusts.
		caFile = o.Security.TLSCertFile
	}
	token, err := ensureAdminKubeconfig(kubeconfig, serverURL, caFile)
	if err != nil {
		listener.Close()
		return nil, err
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
			listener.Close()
			return nil, err
		}
	}

	cfg := &Config{
		Generic:               gc,
		ServiceCIDRs:          cidrs,
		NodePortRange:         nodePorts,
		EtcdServers:           etcdServers,
		EtcdPrefix:            o.EtcdPrefix,
		EtcdTLS:               o.etcdTLS(),
		Model:                 model.Name(o.Allocator),
		RepairInterval:        o.RepairInterval,
		ServerURL:             serverURL,
		KubeconfigPath:        kubeconfig,
		KubernetesServicePort: port,
	}
	return cfg, nil
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
		c.NodePortRange = portrange.MustParse(portrange.Default)
	}
	if c.Model == "" {
		c.Model = ModelIPAddress
	}
	if c.RepairInterval <= 0 {
		c.RepairInterval = report.DefaultInterval
	}
	c.joinTransition = c.NewAllocator == nil
	if c.NewAllocator == nil {
		switch c.Model {
		case ModelIPAddress:
			c.NewAllocator = IPAddressFactory
		default:
			c.NewAllocator = EtcdBitmapFactory
		}
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = "/registry"
	}
	if c.KubernetesServicePort == 0 {
		c.KubernetesServicePort = 6443
	}
	return CompletedConfig{&completedConfig{Config: c, generic: c.Generic.Complete(nil)}}
}
