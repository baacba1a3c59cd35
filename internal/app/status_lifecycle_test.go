package app

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestStatusShowsLifecycle: a STATE column for draining and manual-only
// ServiceCIDRs, a line per draining one with the Services still in it, and
// the same figures in JSON; without any lifecycle, neither appears.
func TestStatusShowsLifecycle(t *testing.T) {
	t.Parallel()
	cidr := func(prefix, source, lifecycle string, services uint64) rangeusage.CIDR {
		return rangeusage.CIDR{Family: subrange.IPv4, Prefix: netip.MustParsePrefix(prefix), Source: source, Ready: true,
			Lifecycle: lifecycle, Services: services, Static: rangeusage.Band{Size: 16}, Dynamic: rangeusage.Band{Size: 238, Used: services}}
	}
	u := &rangeusage.Usage{Model: model.IPAddress,
		Families: []rangeusage.Family{{Family: subrange.IPv4, Size: big.NewInt(762), Used: 13}},
		CIDRs: []rangeusage.CIDR{
			cidr("10.1.0.0/24", "ServiceCIDR/old", "draining", 12),
			cidr("10.2.0.0/24", "ServiceCIDR/dns", "manual-only", 1),
			cidr("10.3.0.0/24", "ServiceCIDR/empty", "draining", 0),
		}}
	var out bytes.Buffer
	if err := writeStatusTable(&out, u, false, 3); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"TOP NAMESPACES  STATE\n",
		"ServiceCIDR/old 10.1.0.0/24 is draining: 12 Services still hold addresses in it\n",
		"ServiceCIDR/empty 10.3.0.0/24 is draining: no Service holds an address in it\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if lines := strings.Split(text, "\n"); !strings.HasSuffix(lines[4], "manual-only") || strings.Contains(text, "ServiceCIDR/dns 10.2.0.0/24 is") {
		t.Errorf("the manual-only row or note is wrong:\n%s", text)
	}
	data, err := json.Marshal(newStatusJSON(u))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"lifecycle":"draining","services":12`) || !strings.Contains(string(data), `"lifecycle":"draining","services":0`) {
		t.Errorf("JSON lacks the lifecycle and Services: %s", data)
	}

	u.CIDRs = []rangeusage.CIDR{cidr("10.1.0.0/24", "ServiceCIDR/plain", "", 12)}
	out.Reset()
	if err := writeStatusTable(&out, u, true, 3); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "STATE") || strings.Contains(out.String(), "draining") {
		t.Errorf("a table without lifecycles shows them:\n%s", out.String())
	}
	if data, _ := json.Marshal(newStatusJSON(u)); strings.Contains(string(data), "services") {
		t.Errorf("JSON without lifecycles counts Services: %s", data)
	}
}
