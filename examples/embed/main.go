// Command embed is a minimal k8s.io/apiserver server, separate from ours,
// that serves /api/v1 services with the cluster IP allocation of
// pkg/servicealloc. It is the README's "Embedding the allocation in another
// API server" as a program that runs, and embed_test.go proves it works, so
// a change of the embedding API cannot go unnoticed.
//
// What it wires, in order (newServer): a scheme with core/v1 Service
// (services.go), a generic server config (TLS on a self-signed certificate,
// a static admin token, OpenAPI), one bitmap allocator per IP family on
// etcd, servicealloc.New over them, and the Service store wrapped by
// servicealloc.NewREST. It deliberately does not use internal/apiserver.
//
// Left out to stay small: namespaces (a Service may be created in any
// namespace), node ports (servicealloc.Config.NodePorts with a
// pkg/bitmap/nodeport allocator), the status subresource, and a repair controller
// (an address reserved by a server that died before storing its Service
// stays taken until one runs).
//
//	go run ./examples/embed --etcd-servers http://127.0.0.1:2379 --token secret
//	kubectl --server https://127.0.0.1:6443 --token secret --insecure-skip-tls-verify create service clusterip web --tcp 80
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	restclient "k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	componentversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	generatedopenapi "github.com/allocator/allocator/pkg/generated/openapi"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/servicealloc"
	"github.com/allocator/allocator/pkg/subrange"
)

// options configure the example server.
type options struct {
	// BindAddress and Port are where it serves HTTPS; port 0 picks a free one.
	BindAddress string
	Port        int
	// EtcdServers are etcd's client URLs; EtcdPrefix is prepended to every key.
	EtcdServers []string
	EtcdPrefix  string
	// ServiceCIDRs are the cluster's service ranges, primary family first:
	// one range, or an IPv4 and an IPv6 range for a dual-stack cluster.
	ServiceCIDRs []netip.Prefix
	// Token is the bearer token of the one (administrator) user.
	Token string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.Token == "" {
		opts.Token = rand.Text()
		klog.InfoS("No --token given: generated one", "token", opts.Token)
	}
	srv, err := newServer(ctx, opts)
	if err == nil {
		klog.InfoS("Serving services", "url", srv.url)
		err = srv.run(ctx)
	}
	if err != nil {
		klog.ErrorS(err, "embed")
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	opts := options{}
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	fs.StringVar(&opts.BindAddress, "bind-address", "127.0.0.1", "address to serve HTTPS on")
	fs.IntVar(&opts.Port, "secure-port", 6443, "port to serve HTTPS on (0: a free one)")
	etcd := fs.String("etcd-servers", "http://127.0.0.1:2379", "etcd client URLs, comma separated")
	fs.StringVar(&opts.EtcdPrefix, "etcd-prefix", "/embed", "prefix of every etcd key")
	cidrs := fs.String("service-cluster-ip-range", "10.96.0.0/16", "one CIDR, or an IPv4 and an IPv6 CIDR, comma separated")
	fs.StringVar(&opts.Token, "token", "", "bearer token of the administrator (empty: a random one, logged)")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	opts.EtcdServers = strings.Split(*etcd, ",")
	for _, s := range strings.Split(*cidrs, ",") {
		prefix, err := subrange.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return opts, fmt.Errorf("--service-cluster-ip-range: %w", err)
		}
		opts.ServiceCIDRs = append(opts.ServiceCIDRs, prefix)
	}
	return opts, nil
}

// server is the example server, built but not yet serving.
type server struct {
	generic *genericapiserver.GenericAPIServer
	etcd    *clientv3.Client // the allocators' client
	url     string           // https://host:port
}

// newServer builds the server. It opens the listener, so clients may connect
// as soon as it returns; they are answered once run is called.
func newServer(ctx context.Context, opts options) (_ *server, err error) {
	scheme, openAPIScheme, err := newSchemes()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme)
	gc, url, err := genericConfig(opts, codecs, openAPIScheme)
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: opts.EtcdServers, DialTimeout: 10 * time.Second})
	if err != nil {
		gc.SecureServing.Listener.Close()
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	defer func() {
		if err != nil {
			client.Close()
			gc.SecureServing.Listener.Close()
		}
	}()

	generic, err := gc.Complete(nil).New("embed", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("create the generic server: %w", err)
	}
	alloc, err := newAllocator(ctx, client, opts)
	if err != nil {
		return nil, err
	}
	storageConfig := storagebackend.NewDefaultConfig(opts.EtcdPrefix, codecs.LegacyCodec(corev1.SchemeGroupVersion))
	storageConfig.Transport.ServerList = opts.EtcdServers
	services, err := newServiceStorage(scheme, restOptions{storage: *storageConfig}, alloc)
	if err != nil {
		return nil, err
	}
	core := genericapiserver.NewDefaultAPIGroupInfo("", scheme, runtime.NewParameterCodec(scheme), codecs)
	core.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"services": services}
	if err := generic.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return nil, fmt.Errorf("install /api/v1: %w", err)
	}
	return &server{generic: generic, etcd: client, url: url}, nil
}

// newAllocator returns the Service allocator: one bitmap allocator per
// family, each a RangeAllocation in etcd at kube-apiserver's key, shared by
// every replica and kept across restarts. Any allocation.Interface will do:
// clusterip.NewAllocator keeps the map in memory instead (then mark the stored
// Services' addresses in it before serving, or they are handed out again).
func newAllocator(ctx context.Context, client *clientv3.Client, opts options) (*servicealloc.Allocator, error) {
	layout := etcdlayout.Layout{Prefix: opts.EtcdPrefix}
	keys := []string{layout.PrimaryServiceIPRange(), layout.SecondaryServiceIPRange()}
	if len(opts.ServiceCIDRs) > len(keys) {
		return nil, fmt.Errorf("at most %d service ranges, got %d", len(keys), len(opts.ServiceCIDRs))
	}
	var families []allocation.Interface
	for i, prefix := range opts.ServiceCIDRs {
		rng, err := subrange.New(prefix, model.Bitmap)
		if err != nil {
			return nil, fmt.Errorf("service range %s: %w", prefix, err)
		}
		a, err := clusterip.NewEtcdAllocator(client, keys[i], rng, bitmap.EtcdOptions{})
		if err != nil {
			return nil, fmt.Errorf("service range %s: %w", prefix, err)
		}
		// Creates the empty map if it is missing (create-if-absent).
		if _, err := a.Initialize(ctx); err != nil {
			return nil, fmt.Errorf("service range %s: %w", prefix, err)
		}
		families = append(families, a)
	}
	return servicealloc.New(servicealloc.Config{Allocators: families})
}

// genericConfig is the k8s.io/apiserver configuration: HTTPS on
// opts.BindAddress with a self-signed certificate made in memory, one
// administrator authenticated by opts.Token, and the OpenAPI models (the
// generic server refuses to install an API group without them).
func genericConfig(opts options, codecs serializer.CodecFactory, openAPIScheme *runtime.Scheme) (*genericapiserver.Config, string, error) {
	gc := genericapiserver.NewConfig(codecs)
	gc.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString(componentversion.DefaultKubeBinaryVersion, "", "")

	namer := openapinamer.NewDefinitionNamer(openAPIScheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIConfig.Info.Title = "embed"
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	gc.OpenAPIV3Config.Info.Title = "embed"

	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = net.ParseIP(opts.BindAddress)
	// No certificate directory: the self-signed certificate stays in memory
	// (the default directory is relative to the working directory).
	serving.ServerCert.CertDirectory = ""
	addr := net.JoinHostPort(opts.BindAddress, strconv.Itoa(opts.Port))
	listener, port, err := genericoptions.CreateListener("tcp", addr, net.ListenConfig{})
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	serving.Listener, serving.BindPort = listener, port
	if err := serving.MaybeDefaultWithSelfSignedCerts(opts.BindAddress, nil, nil); err != nil {
		listener.Close()
		return nil, "", err
	}
	if err := serving.ApplyTo(&gc.SecureServing, &gc.LoopbackClientConfig); err != nil {
		listener.Close()
		return nil, "", err
	}

	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	gc.Authentication.Authenticator = authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{opts.Token: admin}, nil)
	gc.Authorization.Authorizer = authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	// Accept the token of the server's own loopback client too.
	genericapiserver.AuthorizeClientBearerToken(gc.LoopbackClientConfig, &gc.Authentication, &gc.Authorization)
	return gc, "https://" + net.JoinHostPort(opts.BindAddress, strconv.Itoa(port)), nil
}

// restOptions stores Services in etcd as JSON, at kube-apiserver's key
// <prefix>/services/specs/<namespace>/<name> (where the bitmap allocators
// look for Services when a range changes).
type restOptions struct {
	storage storagebackend.Config
}

func (o restOptions) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	if resource != corev1.Resource("services") {
		return generic.RESTOptions{}, fmt.Errorf("no storage for %s", resource)
	}
	return generic.RESTOptions{
		StorageConfig:           o.storage.ForResource(resource),
		Decorator:               generic.UndecoratedStorage,
		DeleteCollectionWorkers: 1,
		ResourcePrefix:          "/services/specs",
	}, nil
}

// run serves until ctx ends, then shuts down and closes the etcd client.
func (s *server) run(ctx context.Context) error {
	defer s.etcd.Close()
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// clientConfig returns a client configuration with full rights on the
// server (its loopback client).
func (s *server) clientConfig() *restclient.Config {
	return restclient.CopyConfig(s.generic.LoopbackClientConfig)
}
