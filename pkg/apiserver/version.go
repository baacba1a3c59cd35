package apiserver

import (
	"runtime/debug"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/version"
)

// servedVersion reports a parseable gitVersion at /version. Without -ldflags
// the component-base placeholder "v0.0.0-master+$Format:%H$" is served, and
// kubectl version fails to parse it; then the k8s.io/apiserver release the
// binary is built on is reported instead (e.g. v1.37.2-allocator).
type servedVersion struct {
	basecompatibility.EffectiveVersion
}

func newEffectiveVersion() basecompatibility.EffectiveVersion {
	return servedVersion{basecompatibility.NewEffectiveVersionFromString(version.DefaultKubeBinaryVersion, "", "")}
}

func (v servedVersion) Info() *apimachineryversion.Info {
	info := v.EffectiveVersion.Info()
	if info != nil && strings.Contains(info.GitVersion, "$Format") {
		info.GitVersion = "v" + version.DefaultKubeBinaryVersion + ".0-allocator"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, dep := range bi.Deps {
				if dep.Path == "k8s.io/apiserver" && strings.HasPrefix(dep.Version, "v0.") {
					info.GitVersion = "v1." + strings.TrimPrefix(dep.Version, "v0.") + "-allocator"
				}
			}
		}
		info.GitCommit = ""
		info.GitTreeState = ""
	}
	return info
}
