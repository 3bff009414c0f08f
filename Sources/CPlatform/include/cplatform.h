#ifndef CPLATFORM_H
#define CPLATFORM_H
// Strata's C shims: the pieces Swift cannot reach portably.
//  - CRC-32C (Castagnoli), hardware accelerated (SSE4.2 / ARMv8 CRC) with a run-time
//    choice and a portable slice-by-8 fallback. Every checksum on disk uses it (FORMAT.md).
//  - fallocate(2) and sync_file_range(2), which Glibc declares only under _GNU_SOURCE;
//    preallocation and durable syncs as Darwin spells them (F_PREALLOCATE, F_FULLFSYNC).
//  - byte-range locks that belong to an open file description (Linux's F_OFD_SETLK), for
//    the reader table shared by a store's processes.
//  - a prefetch hint, which Swift has no spelling for.
//  - the CPU the calling thread runs on (sched_getcpu(3), declared only under _GNU_SOURCE).
//  - posix_spawn with a clean signal mask and no inherited descriptors, for the test
//    harness's servers.
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// Extends the running CRC-32C `crc` (start with 0) over `len` bytes at `data`.
uint32_t cplatform_crc32c_extend(uint32_t crc, const void *data, size_t len);
/// The same value, always computed by the portable software path.
uint32_t cplatform_crc32c_extend_software(uint32_t crc, const void *data, size_t len);
/// 1 when the hardware path is used on this CPU, else 0.
int cplatform_crc32c_hardware_available(void);

/// fallocate(2) with mode 0 (allocate and extend the size); on Darwin fcntl(F_PREALLOCATE)
/// then ftruncate; posix_fallocate elsewhere.
/// Returns 0, or -1 with errno set.
int cplatform_fallocate(int fd, off_t offset, off_t length);

/// Starts writing the file's dirty pages to the device without waiting for them
/// (sync_file_range(2) with SYNC_FILE_RANGE_WRITE over the whole file); does nothing
/// where that call does not exist. Returns 0, or -1 with errno set.
int cplatform_start_writeback(int fd);

/// Makes the file's data (and the metadata needed to read it) durable: fdatasync(2);
/// on Darwin fcntl(F_FULLFSYNC), which also flushes the drive's cache. Returns 0, or -1
/// with errno set. Never retried by callers: a failed sync is final.
int cplatform_sync_data(int fd);

/// Makes the file's data and metadata durable: fsync(2); on Darwin fcntl(F_FULLFSYNC)
/// (fsync only where the file system does not support it). Returns 0, or -1 with errno set.
int cplatform_sync_full(int fd);

/// Starts `path` with `argv`, with no signal blocked
/// and every signal at its default action (whatever the calling thread blocks), standard
/// input and output on /dev/null, and no other descriptor of the caller (on glibc 2.34 and
/// later). The test harness starts servers this way: a shell inheriting a thread's blocked
/// SIGCHLD would never see its child exit. Returns 0 and sets `pid`, or an errno value.
int cplatform_spawn_detached(pid_t *pid, const char *path, char *const argv[]);

/// Locks the byte at `offset` of `fd`'s file: exclusively when `exclusive` is 1, else
/// shared; waiting for it when `wait` is 1. The lock belongs to the open file description
/// (F_OFD_SETLK on Linux; process-wide F_SETLK on Darwin, which has no such lock), so it
/// is released when that descriptor is closed or its process dies, and two descriptors of
/// one process conflict as two processes do. Returns 0, or an errno value (EAGAIN or
/// EACCES when another holder has it and `wait` is 0).
int cplatform_lock_byte(int fd, off_t offset, int exclusive, int wait);

/// The CPU the calling thread is running on (sched_getcpu(3): on Linux a read of the
/// thread's restartable-sequences area or a vDSO call), or where that is unknown a number
/// mixed from the thread's identity. It may change right after the call: a hint for
/// spreading work over per-CPU stripes, never a basis for correctness.
uint32_t cplatform_cpu_hint(void);

/// Gives the memory malloc holds free back to the system (glibc's malloc_trim(3), which
/// also releases free pages inside its heaps, not only at their tops). Returns 1 if any
/// was given back; 0, doing nothing, where the C library has no such call.
int cplatform_release_free_memory(void);

/// Lowers the calling thread's CPU priority by `increment` nice steps (Linux: each thread
/// has its own nice value). Returns 0, or an errno value; 0, doing nothing, elsewhere.
int cplatform_lower_thread_priority(int increment);

/// The calling thread's nice value (0 where threads have none of their own).
int cplatform_thread_nice(void);

/// Releases a lock `cplatform_lock_byte` took. Returns 0, or an errno value.
int cplatform_unlock_byte(int fd, off_t offset);

/// Asks the CPU to start loading the cache line at `address` for reading (a hint: never
/// faults, does nothing for a null or unmapped address).
static inline void cplatform_prefetch(const void *address) { __builtin_prefetch(address, 0, 3); }
#endif
