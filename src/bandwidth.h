/* bandwidth: the machine's measured memory read bandwidth, the denominator of
 * the roofline that `hachi bench` reports (DESIGN.md section 5). */
#ifndef HACHI_BANDWIDTH_H
#define HACHI_BANDWIDTH_H
#include <stddef.h>

/* Read bandwidth in GB/s (1e9 bytes/s): n_threads threads (0 = physical cores)
 * sum a buffer far larger than the last-level cache (1 GiB, halved until it can
 * be allocated, at least 64 MiB) with vector loads; best of several passes.
 * Returns a negative value when no buffer could be allocated or threads not made. */
double hachi_measure_read_bandwidth(int n_threads);

/* Same with an explicit buffer size in bytes (tests use a small one). */
double hachi_measure_read_bandwidth_sized(int n_threads, size_t bytes, int passes);

#endif
