// Package deps pins the modules the project builds on while their real
// importers are being written, so `go mod tidy` keeps them. Delete it once
// every import below has a real user.
package deps

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/client/v3/concurrency"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/networking/v1"
	_ "k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	_ "k8s.io/apiserver/pkg/authentication/request/bearertoken"
	_ "k8s.io/apiserver/pkg/authentication/token/tokenfile"
	_ "k8s.io/apiserver/pkg/endpoints/openapi"
	_ "k8s.io/apiserver/pkg/registry/generic/registry"
	_ "k8s.io/apiserver/pkg/server"
	_ "k8s.io/apiserver/pkg/server/options"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/util/workqueue"
	_ "k8s.io/component-base/metrics"
	_ "k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/version"
	_ "k8s.io/klog/v2"
	_ "k8s.io/kube-openapi/pkg/common"
)
