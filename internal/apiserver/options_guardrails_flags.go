package apiserver

import (
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

// AddFlags registers the guardrail flags on fs: the same flags as serve's,
// for a command that judges ServiceCIDRs by them too (the webhook).
func (o *GuardrailOptions) AddFlags(fs *pflag.FlagSet) {
	fss := cliflag.NamedFlagSets{}
	o.addFlags(&fss)
	for _, name := range fss.Order {
		fs.AddFlagSet(fss.FlagSets[name])
	}
}
