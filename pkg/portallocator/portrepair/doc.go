// Package portrepair is the node-port repair. It follows the bitmap repair's
// rules with ports for addresses (and upstream's portallocator repair for
// reasons and texts): a port allocated with no Service is freed on the 3rd
// consecutive pass that sees it and no sooner than LeakGrace after the first;
// a port a Service holds that the map lacks is set again (PortNotAllocated);
// two Services on one port (PortAlreadyAllocated) and ports outside the range
// (PortOutOfRange) are reported, never changed. The map is written with a CAS
// on the revision the pass read; a lost compare merges the pass's changes onto
// a fresh read, after reading again a Service whose port it would set (one
// deleted meanwhile gets no bit and no PortNotAllocated). All of that is
// pkg/rangealloc/rangerepair's, shared with the bitmap repair; this file holds
// upstream's texts. The node-port map is the same in both IP models, so IP-
// model migration never touches it.
package portrepair
