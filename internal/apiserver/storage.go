package apiserver

import (
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/recognizer"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/allocator/allocator/pkg/etcdlayout"
)

// resourcePrefixes are kube-apiserver's etcd key prefixes (below
// --etcd-prefix) for the resources we store, so what we write is where a
// kube-apiserver looks for it.
var resourcePrefixes = map[schema.GroupResource]string{
	{Group: "", Resource: "services"}:                         "/" + etcdlayout.ServicesPath,
	{Group: "", Resource: "namespaces"}:                       "/" + etcdlayout.NamespacesPath,
	{Group: "", Resource: "events"}:                           "/" + etcdlayout.EventsPath,
	{Group: networkingv1.GroupName, Resource: "ipaddresses"}:  "/" + etcdlayout.IPAddressesPath,
	{Group: networkingv1.GroupName, Resource: "servicecidrs"}: "/" + etcdlayout.ServiceCIDRsPath,
}

// restOptionsGetter gives every resource a storage on etcd with
// kube-apiserver's key layout and encoding: protobuf with the "k8s\x00"
// envelope (the apimachinery protobuf serializer), external version v1;
// JSON values are read too.
// Reads go through the watch cache, but for the resources without one
// (Config.NoWatchCache), which read etcd.
type restOptionsGetter struct {
	base   storagebackend.Config
	stores *etcdStores
	// countPollPeriod is the registry's count of each resource's objects
	// (Config.CountMetricPollPeriod; 0: none).
	countPollPeriod time.Duration
}

// DefaultCountMetricPollPeriod is how often the registry counts each
// resource's objects in etcd unless told otherwise, as kube-apiserver.
const DefaultCountMetricPollPeriod = time.Minute

// countPollPeriod is Config.CountMetricPollPeriod for
// --etcd-count-metric-poll-period, whose 0 turns the count off.
func countPollPeriod(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}

// DefaultCompactionInterval is how often the server compacts etcd unless
// told otherwise, as kube-apiserver.
const DefaultCompactionInterval = 5 * time.Minute

// compactionInterval is Config.CompactionInterval for
// --etcd-compaction-interval, whose 0 turns the compaction off.
func compactionInterval(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}

// compactsEvery is the interval the stores compact at for
// Config.CompactionInterval (0: never).
func compactsEvery(configured time.Duration) time.Duration {
	switch {
	case configured > 0:
		return configured
	case configured < 0:
		return 0
	}
	return DefaultCompactionInterval
}

// newRESTOptionsGetter reaches etcd at etcdServers over gRPC (logging
// through log; nil logs nothing), or in process when inProcess is set
// (etcd_stores.go). Every store's etcd writes go through guard (nil: none),
// the server's etcdhistory.Marker.Guard.
func newRESTOptionsGetter(etcdServers []string, etcdPrefix string, etcdTLS EtcdTLS, inProcess InProcessEtcd, log *zap.Logger, guard func(clientv3.KV) clientv3.KV) *restOptionsGetter {
	base := storagebackend.NewDefaultConfig(etcdPrefix, nil)
	base.Transport.ServerList = etcdServers
	base.Transport.TrustedCAFile = etcdTLS.CAFile
	base.Transport.CertFile = etcdTLS.CertFile
	base.Transport.KeyFile = etcdTLS.KeyFile
	g := &restOptionsGetter{base: *base, countPollPeriod: DefaultCountMetricPollPeriod}
	switch {
	case inProcess != nil:
		g.stores = inProcessStores(inProcess)
	default:
		if log == nil {
			log = zap.NewNop()
		}
		g.stores = grpcStores(base.Transport, log)
	}
	g.stores.guard = guard
	return g
}

func (g *restOptionsGetter) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	prefix, ok := resourcePrefixes[resource]
	if !ok {
		return generic.RESTOptions{}, fmt.Errorf("no storage configured for %s", resource.String())
	}
	cfg := g.base
	cfg.Codec = storageCodec(resource.Group)
	cfg.EncodeVersioner = schema.GroupVersion{Group: resource.Group, Version: "v1"}
	return generic.RESTOptions{
		StorageConfig:           cfg.ForResource(resource),
		Decorator:               g.stores.decorator(),
		DeleteCollectionWorkers: 1,
		EnableGarbageCollection: false,
		ResourcePrefix:          prefix,
		CountMetricPollPeriod:   g.countPollPeriod,
	}, nil
}

// storageCodec is the codec of a group's resources in etcd. Values are
// written as protobuf and read as protobuf or JSON: a cluster that ran
// kube-apiserver with --storage-media-type=application/json, or an old
// one, has JSON values, and kube-apiserver reads them.
func storageCodec(group string) runtime.Codec {
	external := schema.GroupVersion{Group: group, Version: "v1"}
	internal := schema.GroupVersion{Group: group, Version: runtime.APIVersionInternal}
	serializer := protobuf.NewSerializer(Scheme, Scheme)
	decoder := recognizer.NewDecoder(serializer,
		json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme, json.SerializerOptions{}))
	return Codecs.CodecForVersions(serializer, decoder, external, internal)
}
