package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/etcdlayout"
	ipcontroller "github.com/allocator/allocator/pkg/ipallocator/controller"
	"github.com/allocator/allocator/pkg/subrange"
)

// clusterFlags say how the standalone job reaches a cluster: Services,
// IPAddresses and ServiceCIDRs through the Kubernetes API, the bitmap model's
// RangeAllocations through etcd. They work unchanged against a real
// kube-apiserver cluster, whose etcd layout is the same (design.md §5).
type clusterFlags struct {
	kubeconfig   string
	etcdServers  []string
	etcdPrefix   string
	etcdCAFile   string
	etcdCertFile string
	etcdKeyFile  string
	serviceRange string

	// plugin: run as `kubectl allocator`; the API is reached through
	// kubectl's own connection flags, not --kubeconfig alone: kube holds
	// --kubeconfig, overrides the rest (--context, -n, --user, -s, ...).
	plugin    bool
	kube      *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	// namespaced: the command honours -n (status); the others work on the
	// whole cluster and refuse it.
	namespaced bool
	fs         *pflag.FlagSet
}

func (f *clusterFlags) addFlags(fs *pflag.FlagSet) {
	f.fs = fs
	if f.plugin {
		// kubectl's flags, read the way kubectl reads them (--kubeconfig,
		// $KUBECONFIG, ~/.kube/config, --context, --cluster, --user, -n, -s,
		// --token, --as, ...). They come from client-go's clientcmd, which
		// kubectl's own (k8s.io/cli-runtime's ConfigFlags) wraps: the same
		// names and loading rules, without cli-runtime's dependencies
		// (kustomize and its embedded OpenAPI documents: +38 MB, +31%, of
		// binary for flags client-go already has).
		f.kube = clientcmd.NewDefaultClientConfigLoadingRules()
		fs.StringVar(&f.kube.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
		clientcmd.BindOverrideFlags(&f.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	} else {
		fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, else the in-cluster config)")
	}
	fs.StringSliceVar(&f.etcdServers, "etcd-servers", nil, "etcd client URLs holding the bitmap model's RangeAllocations")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", etcdlayout.DefaultPrefix, "etcd key prefix of the cluster's data")
	fs.StringVar(&f.etcdCAFile, "etcd-cafile", "", "CA bundle to verify the etcd servers")
	fs.StringVar(&f.etcdCertFile, "etcd-certfile", "", "client certificate for etcd")
	fs.StringVar(&f.etcdKeyFile, "etcd-keyfile", "", "client key for etcd")
	fs.StringVar(&f.serviceRange, "service-cluster-ip-range", "", "the bitmap ranges, primary family first (default: read from the stored maps, or from the ServiceCIDR \"kubernetes\")")
}

// kubeClient builds a clientset from --kubeconfig, $KUBECONFIG or the
// in-cluster config.
func (f *clusterFlags) kubeClient() (kubernetes.Interface, error) {
	if ns := f.namespace(); ns != "" && !f.namespaced {
		// A repair or migration of one namespace would take every other
		// namespace's addresses for leaks.
		return nil, &usageError{fmt.Errorf("-n/--namespace %s: this command works on the whole cluster; drop -n", ns)}
	}
	var cfg *rest.Config
	var err error
	switch path := f.kubeconfigPath(); {
	case f.kube != nil:
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.kube, &f.overrides).ClientConfig()
	case path != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	default:
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = "allocator-repair"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// namespace is -n when it was given on the command line (plugin mode); the
// kubeconfig context's default namespace does not narrow anything.
func (f *clusterFlags) namespace() string {
	if f.kube == nil || f.fs == nil || !f.fs.Changed(clientcmd.FlagNamespace) {
		return ""
	}
	return f.overrides.Context.Namespace
}

func (f *clusterFlags) kubeconfigPath() string {
	if f.kubeconfig != "" {
		return f.kubeconfig
	}
	return os.Getenv("KUBECONFIG")
}

// quietGRPC silences gRPC's own logging once per process (it is global).
var quietGRPC sync.Once

// etcdProbeTimeout bounds the first request to etcd: an unreachable
// endpoint fails the job in seconds instead of being retried forever.
const etcdProbeTimeout = 5 * time.Second

// etcdClient connects to --etcd-servers, with TLS when certificates are
// given, and checks with one bounded read that etcd answers. clientv3.New
// does not wait for a connection (its DialTimeout only applies to blocking
// dials), so without the read a job on an unreachable etcd retried for 10+
// minutes.
func (f *clusterFlags) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	if len(f.etcdServers) == 0 {
		return nil, errors.New("--etcd-servers is required for the bitmap model")
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
			return nil, fmt.Errorf("etcd %s did not answer within %v (is it running, and are --etcd-cafile/--etcd-certfile/--etcd-keyfile right?)", endpoints, etcdProbeTimeout)
		}
		return nil, fmt.Errorf("etcd %s: %w", endpoints, err)
	}
	return client, nil
}

// bitmapStores returns one store per family, primary first: from
// --service-cluster-ip-range, else from the ranges the stored maps record,
// else from fallback (the default ServiceCIDR's CIDRs). It returns no stores,
// and no error, when nothing says which ranges to use.
func (f *clusterFlags) bitmapStores(ctx context.Context, etcd *clientv3.Client, fallback []string) ([]ipcontroller.BitmapStore, error) {
	layout := etcdlayout.Layout{Prefix: f.etcdPrefix}
	keys := []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()}
	var ranges []string
	switch {
	case f.serviceRange != "":
		ranges = strings.Split(f.serviceRange, ",")
	default:
		for _, key := range keys {
			resp, err := etcd.Get(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", key, err)
			}
			if len(resp.Kvs) == 0 {
				break
			}
			ra, err := etcdlayout.DecodeRangeAllocation(resp.Kvs[0].Value)
			if err != nil {
				return nil, etcdlayout.WithKey(key, err)
			}
			ranges = append(ranges, ra.Range)
		}
		if len(ranges) == 0 {
			ranges = fallback
		}
	}
	if len(ranges) > len(keys) {
		return nil, fmt.Errorf("at most two service ranges (one per family), got %v", ranges)
	}
	var stores []ipcontroller.BitmapStore
	for i, text := range ranges {
		prefix, err := subrange.ParsePrefix(strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("service range: %w", err)
		}
		rng, err := subrange.New(prefix, subrange.ModelBitmap)
		if err != nil {
			return nil, fmt.Errorf("service range %s: %w", prefix, err)
		}
		store, err := bitmap.NewEtcdAllocator(etcd, keys[i], rng, bitmap.EtcdOptions{})
		if err != nil {
			return nil, err
		}
		stores = append(stores, store)
	}
	if len(stores) == 2 && stores[0].Range().IPv6() == stores[1].Range().IPv6() {
		return nil, fmt.Errorf("the two service ranges must be of different families: %s, %s", stores[0].Range().Prefix(), stores[1].Range().Prefix())
	}
	return stores, nil
}
