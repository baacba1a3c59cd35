// Package dualwrite tests the dual writer (pkg/ipaddress/dualwrite), which
// claims a bit in the bitmap and an IPAddress for each address, against the
// real API server in-process (internal/testserver), which serves the
// IPAddresses and the default ServiceCIDR.
package dualwrite
