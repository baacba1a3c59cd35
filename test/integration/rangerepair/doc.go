// Package rangerepair tests the RangeAllocation repair core
// (pkg/rangealloc/rangerepair) on a node-port map of its own, with the
// Services it reads again served by the real API server in-process
// (internal/testserver).
package rangerepair
