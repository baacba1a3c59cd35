package apiserver

import (
	handlersmetrics "k8s.io/apiserver/pkg/endpoints/handlers/metrics"
	apimetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	cachermetrics "k8s.io/apiserver/pkg/storage/cacher/metrics"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
	storagemetrics "k8s.io/apiserver/pkg/storage/metrics"
	flowcontrolmetrics "k8s.io/apiserver/pkg/util/flowcontrol/metrics"
)

// registerAPIServerMetrics registers k8s.io/apiserver's own metrics in the
// process-wide registry that /metrics serves, as kube-apiserver's /metrics
// does (routes.DefaultMetrics, which the server does not install: it
// serves its own registry beside the process-wide one): the requests
// (apiserver_request_total, apiserver_request_duration_seconds), etcd's
// (etcd_request_duration_seconds), the objects each resource holds
// (apiserver_resource_objects, apiserver_storage_objects: the registry's
// count, --etcd-count-metric-poll-period), the watch caches' and flow
// control's. Each package registers once per process.
func registerAPIServerMetrics() {
	apimetrics.Register()
	handlersmetrics.Register()
	storagemetrics.Register()
	cachermetrics.Register()
	etcd3metrics.Register()
	flowcontrolmetrics.Register()
}
