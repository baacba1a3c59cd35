package apiserver

import (
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"
	componentversion "k8s.io/component-base/version"

	"github.com/allocator/allocator/internal/version"
)

// servedVersion serves this binary's own version at /version (see
// internal/version): the Kubernetes release of its API with build metadata naming
// allocator and the VCS revision, the revision, and the commit time.
type servedVersion struct {
	basecompatibility.EffectiveVersion
	info apimachineryversion.Info
}

func newEffectiveVersion() basecompatibility.EffectiveVersion {
	return servedVersion{
		EffectiveVersion: basecompatibility.NewEffectiveVersionFromString(componentversion.DefaultKubeBinaryVersion, "", ""),
		info:             version.Get().Kubernetes(),
	}
}

func (v servedVersion) Info() *apimachineryversion.Info {
	info := v.info
	return &info
}
