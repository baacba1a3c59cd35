// Package version says which allocator a binary is: its module version and
// the VCS revision Go embedded when it was built from a checkout
// (runtime/debug.ReadBuildInfo), and the Kubernetes API level it serves (the
// release of k8s.io/apiserver it is built on).
//
// Invariants: nothing here needs -ldflags. component-base's version variables
// are only set by Kubernetes' own build scripts; without them a binary said
// "v0.0.0-master+$Format:%H$" built on 1970-01-01, and /version claimed a
// made-up "v1.37.2-allocator". Unknown facts are left empty, never invented.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	componentversion "k8s.io/component-base/version"
)

// Info describes this binary.
type Info struct {
	// Version is the main module's version: a tag, or the pseudo-version Go
	// derives from the commit; "devel" when Go recorded none (go test, go run
	// outside a checkout).
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, if known.
	Revision string `json:"revision,omitempty"`
	// Modified is true when the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// CommitTime is the commit's time (RFC 3339), if known.
	CommitTime string `json:"commitTime,omitempty"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
	// KubernetesVersion is the Kubernetes release whose API the server
	// serves: that of the k8s.io/apiserver module it is built on, e.g. v1.37.2.
	KubernetesVersion string `json:"kubernetesVersion"`
}

// Get reads the binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is Get on given build information (nil: none recorded).
func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: "devel", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info.KubernetesVersion = "v" + componentversion.DefaultKubeBinaryVersion + ".0"
	if bi == nil {
		return info
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	for _, dep := range bi.Deps {
		if dep.Path == "k8s.io/apiserver" {
			if k, ok := kubernetesRelease(dep.Version); ok {
				info.KubernetesVersion = k
			}
		}
	}
	return info
}

// kubernetesRelease maps a k8s.io staging module version (v0.37.2) to the
// Kubernetes release it belongs to (v1.37.2).
func kubernetesRelease(moduleVersion string) (string, bool) {
	rest, ok := strings.CutPrefix(moduleVersion, "v0.")
	if !ok || rest == "" {
		return "", false
	}
	return "v1." + rest, true
}

// ShortRevision is the first 12 characters of the revision.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the one-line form `allocator version` prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "allocator %s", i.Version)
	if i.Revision != "" {
		fmt.Fprintf(&b, " (revision %s", i.Revision)
		if i.Modified {
			b.WriteString(", modified")
		}
		if i.CommitTime != "" {
			fmt.Fprintf(&b, ", committed %s", i.CommitTime)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ", %s %s, Kubernetes API %s", i.GoVersion, i.Platform, i.KubernetesVersion)
	return b.String()
}

// Kubernetes is what /version serves. kubectl compares gitVersion's minor
// with its own, so gitVersion is the Kubernetes release the API comes from,
// with semver build metadata naming allocator and the revision (for example
// v1.37.2+allocator.0123456789ab): a kubectl of the same minor sees no skew.
func (i Info) Kubernetes() apimachineryversion.Info {
	out := apimachineryversion.Info{
		GitVersion: i.KubernetesVersion + "+allocator",
		GitCommit:  i.Revision,
		BuildDate:  i.CommitTime,
		GoVersion:  i.GoVersion,
		Compiler:   runtime.Compiler,
		Platform:   i.Platform,
	}
	if r := i.ShortRevision(); r != "" {
		out.GitVersion += "." + r
	}
	if i.Revision != "" {
		out.GitTreeState = "clean"
		if i.Modified {
			out.GitTreeState = "dirty"
			out.GitVersion += ".dirty"
		}
	}
	core := strings.TrimPrefix(i.KubernetesVersion, "v")
	if parts := strings.SplitN(core, ".", 3); len(parts) >= 2 {
		out.Major, out.Minor = parts[0], parts[1]
	}
	return out
}
