package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// clusterFlags say how the standalone job reaches a cluster: Services,
// IPAddresses and ServiceCIDRs through the Kubernetes API, the bitmap model's
// RangeAllocations through etcd. They work unchanged against a real
// kube-apiserver cluster, whose etcd layout is the same (design.md §5).
type clusterFlags struct {
	// dataDir is --data-dir: the etcd flags not given are read from the
	// data dir of an `allocator serve` running its embedded etcd.
	dataDir      string
	etcdServers  []string
	etcdPrefix   string
	etcdCAFile   string
	etcdCertFile string
	etcdKeyFile  string
	serviceRange string

	// kube are the kubeconfig loading rules, kubectl's: --kubeconfig, else
	// $KUBECONFIG, else ~/.kube/config, else the in-cluster config.
	kube *clientcmd.ClientConfigLoadingRules
	// plugin: run as `kubectl allocator` (kubectl's wording in the help);
	// both names take kubectl's connection flags into overrides.
	plugin    bool
	overrides clientcmd.ConfigOverrides
	// namespaced: the command honours -n (status); the others work on the
	// whole cluster and refuse it.
	namespaced bool
	fs         *pflag.FlagSet
}

// addFlags registers every connection flag: the Kubernetes API's, etcd's
// and the service range.
func (f *clusterFlags) addFlags(fs *pflag.FlagSet) {
	f.addKubeFlags(fs)
	f.addEtcdFlags(fs)
	f.addRangeFlag(fs)
}

// addKubeFlags registers how the Kubernetes API is reached: kubectl's
// connection flags (--kubeconfig, --context, --cluster, --user, -n, -s,
// --token, --as, ...), read the way kubectl reads them, under both names of
// the binary. They come from client-go's clientcmd, which kubectl's own
// (k8s.io/cli-runtime's ConfigFlags) wraps: the same names and loading
// rules, without cli-runtime's dependencies (kustomize and its embedded
// OpenAPI documents: +38 MB, +31%, of binary for flags client-go already
// has). A command that works on the whole cluster refuses -n when it runs.
func (f *clusterFlags) addKubeFlags(fs *pflag.FlagSet) {
	f.fs = fs
	f.kube = newLoadingRules()
	fs.StringVar(&f.kube.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "",
		"Path to the kubeconfig file to use (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster config).")
	flags := clientcmd.RecommendedConfigOverrideFlags("")
	flags.ClusterOverrideFlags.APIServer.ShortName = "s" // kubectl's -s (cli-runtime adds it; clientcmd does not)
	clientcmd.BindOverrideFlags(&f.overrides, fs, flags)
	if f.namespaced && !f.plugin {
		if ns := fs.Lookup(clientcmd.FlagNamespace); ns != nil {
			ns.Usage = "Show this namespace's share of each range only (the totals stay the cluster's)."
		}
	}
}

// addEtcdFlags registers how etcd is reached.
func (f *clusterFlags) addEtcdFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", "", "the --data-dir of an allocator serve running its embedded etcd: its endpoint and client certificate are read from there (the --etcd-* flags given win)")
	fs.StringSliceVar(&f.etcdServers, "etcd-servers", nil, "etcd client URLs (http:// or https://) holding the bitmap model's RangeAllocations")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", etcdlayout.DefaultPrefix, "etcd key prefix of the cluster's data")
	fs.StringVar(&f.etcdCAFile, "etcd-cafile", "", "CA bundle to verify the etcd servers")
	fs.StringVar(&f.etcdCertFile, "etcd-certfile", "", "client certificate for etcd")
	fs.StringVar(&f.etcdKeyFile, "etcd-keyfile", "", "client key for etcd")
}

// addRangeFlag registers --service-cluster-ip-range.
func (f *clusterFlags) addRangeFlag(fs *pflag.FlagSet) {
	fs.StringVar(&f.serviceRange, "service-cluster-ip-range", "", "the bitmap ranges, primary family first (default: read from the stored maps, or from the ServiceCIDR \"kubernetes\")")
}

// validate fills the etcd flags not given from --data-dir and checks the
// flags' values, before anything is reached.
func (f *clusterFlags) validate() error {
	if err := f.useDataDir(); err != nil {
		return err
	}
	return apiserver.CheckEtcdServers(f.etcdServers)
}

// newLoadingRules returns clientcmd's default loading rules ($KUBECONFIG,
// else ~/.kube/config) with the home directory read when the command runs:
// clientcmd fixes ~/.kube/config when the process starts, and the commands
// take their environment when they run (tests run them in-process). The
// rules' migration of a pre-2015 ~/.kube/.kubeconfig is left out: it writes
// into the home directory, and it is keyed on the path fixed at start.
func newLoadingRules() *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.MigrationRules = nil
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = []string{filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	return rules
}

// kubeClient builds a clientset from the kubeconfig the loading rules find,
// else the in-cluster config.
func (f *clusterFlags) kubeClient(options ...func(*rest.Config)) (kubernetes.Interface, error) {
	if ns := f.namespace(); ns != "" && !f.namespaced {
		// A repair or migration of one namespace would take every other
		// namespace's addresses for leaks.
		return nil, &usageError{fmt.Errorf("-n/--namespace %s: this command works on the whole cluster; drop -n", ns)}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.kube, &f.overrides).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, f.noConfigError()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = "allocator-repair"
	// Protobuf, which every API server serves for the built-in kinds these
	// commands read: the repair's lists of every Service and IPAddress
	// decode several times faster than as JSON.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	for _, o := range options {
		o(cfg)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// noConfigError says, in one line, where the loading rules looked for a
// cluster and why each place gave none.
func (f *clusterFlags) noConfigError() error {
	var tried []string
	files := func(paths []string) string {
		var out []string
		for _, path := range paths {
			if _, err := os.Stat(path); err != nil {
				out = append(out, path+" not found")
			} else {
				out = append(out, path+" selects no cluster")
			}
		}
		return strings.Join(out, ", ")
	}
	switch {
	case f.kube.ExplicitPath != "":
		tried = append(tried, "--kubeconfig "+files([]string{f.kube.ExplicitPath}))
	case os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "":
		tried = append(tried, "--kubeconfig not given", "$KUBECONFIG: "+files(f.kube.Precedence))
	default:
		tried = append(tried, "--kubeconfig not given", "$KUBECONFIG not set", files(f.kube.Precedence))
	}
	// The in-cluster config needs both variables and the token file.
	switch {
	case os.Getenv("KUBERNETES_SERVICE_HOST") == "":
		tried = append(tried, "in-cluster config: KUBERNETES_SERVICE_HOST not set")
	case os.Getenv("KUBERNETES_SERVICE_PORT") == "":
		tried = append(tried, "in-cluster config: KUBERNETES_SERVICE_PORT not set")
	default:
		tried = append(tried, "in-cluster config: no service account token")
	}
	return fmt.Errorf("no Kubernetes cluster found: %s", strings.Join(tried, "; "))
}

// namespace is -n when it was given on the command line; the kubeconfig
// context's default namespace does not narrow anything.
func (f *clusterFlags) namespace() string {
	if f.fs == nil || !f.fs.Changed(clientcmd.FlagNamespace) {
		return ""
	}
	return f.overrides.Context.Namespace
}

// quietGRPC silences gRPC's own logging once per process (it is global).
var quietGRPC sync.Once

// etcdProbeTimeout bounds the first request to etcd: an unreachable
// endpoint fails the job in seconds instead of being retried forever.
const etcdProbeTimeout = 5 * time.Second

// etcdHint says how a job is given etcd.
const etcdHint = "pass --data-dir DIR (the --data-dir of an allocator serve running its embedded etcd) " +
	"or --etcd-servers URL (with --etcd-cafile, --etcd-certfile and --etcd-keyfile for TLS)"

// errNoEtcd is the answer to a job that needs etcd and was given none.
var errNoEtcd = errors.New("no etcd given: " + etcdHint)

// etcdClient connects to --etcd-servers, with TLS when certificates are
// given, and checks with one bounded read that etcd answers. clientv3.New
// does not wait for a connection (its DialTimeout only applies to blocking
// dials), so without the read a job on an unreachable etcd retried for 10+
// minutes.
func (f *clusterFlags) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	if len(f.etcdServers) == 0 {
		return nil, errNoEtcd
	}
	endpoints := strings.Join(f.etcdServers, ",")
	quietGRPC.Do(func() {
		// gRPC logs every failed connection attempt (through klog, which
		// k8s.io/apiserver installs); the job reports the failure itself,
		// in one line.
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	})
	cfg := clientv3.Config{Endpoints: f.etcdServers, DialTimeout: etcdProbeTimeout, Logger: zap.NewNop(), Context: ctx}
	if f.etcdCAFile != "" || f.etcdCertFile != "" || f.etcdKeyFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: f.etcdCertFile, KeyFile: f.etcdKeyFile, TrustedCAFile: f.etcdCAFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", endpoints, err)
	}
	probeCtx, cancel := context.WithTimeout(ctx, etcdProbeTimeout)
	defer cancel()
	if _, err := client.Get(probeCtx, etcdlayout.Layout{Prefix: f.etcdPrefix}.RangesPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		client.Close()
		if errors.Is(err, context.DeadlineExceeded) || probeCtx.Err() != nil {
			hint := "is it running, and are --etcd-cafile/--etcd-certfile/--etcd-keyfile right?"
			if f.dataDir != "" {
				hint = "is allocator serve running on --data-dir " + f.dataDir + "?"
			}
			return nil, fmt.Errorf("etcd %s did not answer within %v (%s)", endpoints, etcdProbeTimeout, hint)
		}
		return nil, fmt.Errorf("etcd %s: %w", endpoints, err)
	}
	return client, nil
}

// etcdConn is a job's one etcd client, opened when first needed; the job
// closes it.
type etcdConn struct {
	flags  *clusterFlags
	client *clientv3.Client
}

func (c *etcdConn) open(ctx context.Context) (*clientv3.Client, error) {
	if c.client == nil {
		client, err := c.flags.etcdClient(ctx)
		if err != nil {
			return nil, err
		}
		c.client = client
	}
	return c.client, nil
}

func (c *etcdConn) close() {
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}

// ipCluster is the cluster as internal/ipallocator's job entries take it, its
// etcd (when --etcd-servers is given, or read from --data-dir) opened
// through conn.
func (f *clusterFlags) ipCluster(m model.Name, client kubernetes.Interface, conn *etcdConn) ipallocator.Cluster {
	c := ipallocator.Cluster{Model: m, EtcdPrefix: f.etcdPrefix, Ranges: f.ranges(), Client: client}
	if len(f.etcdServers) > 0 {
		conn.flags = f
		c.Etcd = conn.open
	}
	return c
}

// ranges are --service-cluster-ip-range's CIDRs, or none.
func (f *clusterFlags) ranges() []string {
	if f.serviceRange == "" {
		return nil
	}
	return strings.Split(f.serviceRange, ",")
}

// explain turns what internal/ipallocator refuses into what to give on the
// command line.
func explain(err error) error {
	switch {
	case errors.Is(err, ipallocator.ErrNoEtcd):
		return fmt.Errorf("%w; %s", err, etcdHint)
	case errors.Is(err, ipallocator.ErrNoMap):
		return fmt.Errorf("%w: give --service-cluster-ip-range to create it", err)
	}
	return err
}
