// strata-bench --split-cpus: pins the calling thread to a range of CPUs (Linux; the C
// library declares sched_setaffinity and its CPU_SET macros only under _GNU_SOURCE).
#ifndef STRATA_BENCH_AFFINITY_H
#define STRATA_BENCH_AFFINITY_H
#ifdef __linux__
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <errno.h>

/// Pins the calling thread, and the threads it starts later, to CPUs first..<first+count:
/// 0, or the errno of sched_setaffinity.
static inline int strata_bench_pin_cpus(int first, int count) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu = first; cpu < first + count; cpu++) CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}
#else
static inline int strata_bench_pin_cpus(int first, int count) { (void)first; (void)count; return 0; }
#endif
#endif
