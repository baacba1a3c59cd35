package apiserver

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/ipallocator"
)

// modelAnnotations are the annotations the default ServiceCIDR is created
// with: ipallocator.AnnotationModel naming the model this server allocates
// with, the API's one sign of it for jobs without etcd.
func (s *Server) modelAnnotations() map[string]string {
	return map[string]string{ipallocator.AnnotationModel: s.cfg.Model.String()}
}

// markModel sets ipallocator.AnnotationModel on the default ServiceCIDR to
// this server's model when it names another or none. Bootstrap calls it
// once per start, and the ServiceCIDR is created with it, so replicas of
// two models never rewrite it in turns: the last one started names its
// model. A ServiceCIDR being deleted is left alone (it is re-created with
// the annotation). kube-apiserver ignores the annotation.
func (s *Server) markModel(ctx context.Context, client kubernetes.Interface) error {
	api := client.NetworkingV1().ServiceCIDRs()
	sc, err := api.Get(ctx, DefaultServiceCIDRName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get default ServiceCIDR: %w", err)
	}
	want := s.cfg.Model.String()
	if sc.DeletionTimestamp != nil || sc.Annotations[ipallocator.AnnotationModel] == want {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": s.modelAnnotations()}})
	if err != nil {
		return err
	}
	if _, err := api.Patch(ctx, DefaultServiceCIDRName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotate default ServiceCIDR with the %s model: %w", want, err)
	}
	return nil
}
