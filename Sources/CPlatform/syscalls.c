// Syscalls that Glibc declares only under _GNU_SOURCE, and the calls whose right spelling
// differs between Linux and Darwin, wrapped for Swift. The Darwin paths follow Apple's
// fcntl(2) and fsync(2) manual pages; CI builds and tests only the Linux ones.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "cplatform.h"

int cplatform_fallocate(int fd, off_t offset, off_t length) {
#if defined(__linux__)
    return fallocate(fd, 0, offset, length);
#elif defined(__APPLE__)
    // Darwin has no posix_fallocate: reserve the blocks past the end of the file
    // (contiguous if possible), then extend the size as fallocate's mode 0 does.
    struct stat info;
    if (fstat(fd, &info) != 0) return -1;
    off_t end = offset + length;
    if (end <= info.st_size) return 0;
    fstore_t store = { F_ALLOCATECONTIG, F_PEOFPOSMODE, 0, end - info.st_size, 0 };
    if (fcntl(fd, F_PREALLOCATE, &store) == -1) {
        store.fst_flags = F_ALLOCATEALL;
        if (fcntl(fd, F_PREALLOCATE, &store) == -1) return -1;
    }
    return ftruncate(fd, end);
#else
    int rc = posix_fallocate(fd, offset, length);
    if (rc != 0) { errno = rc; return -1; }
    return 0;
#endif
}

int cplatform_start_writeback(int fd) {
#ifdef __linux__
    return sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
    return 0;
#endif
}

int cplatform_sync_data(int fd) {
#if defined(__APPLE__)
    return cplatform_sync_full(fd);
#else
    return fdatasync(fd);
#endif
}

int cplatform_sync_full(int fd) {
#if defined(__APPLE__)
    // fsync on Darwin only hands the data to the drive, which may keep it in its cache
    // across a power loss; F_FULLFSYNC asks the drive to flush. A file system that does
    // not support it says so (ENOTSUP, EINVAL): only then is fsync the best there is.
    if (fcntl(fd, F_FULLFSYNC) == 0) return 0;
    if (errno != ENOTSUP && errno != EINVAL) return -1;
    return fsync(fd);
#else
    return fsync(fd);
#endif
}

#include <signal.h>
#include <spawn.h>
extern char **environ;

int cplatform_spawn_detached(pid_t *pid, const char *path, char *const argv[]) {
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_t actions;
    sigset_t none, all;
    int rc = posix_spawnattr_init(&attributes);
    if (rc != 0) return rc;
    rc = posix_spawn_file_actions_init(&actions);
    if (rc != 0) { posix_spawnattr_destroy(&attributes); return rc; }
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
#if defined(__linux__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    rc = posix_spawn(pid, path, &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    return rc;
}

static int cplatform_byte_lock(int fd, off_t offset, short type, int wait) {
    struct flock lock = { 0 };
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = offset;
    lock.l_len = 1;
#if defined(__linux__)
    int command = wait ? F_OFD_SETLKW : F_OFD_SETLK;
#else
    // Process-wide locks: two openings in one process do not exclude each other, and
    // closing either releases both. Only Linux is built and tested (README, "Platforms").
    int command = wait ? F_SETLKW : F_SETLK;
#endif
    while (fcntl(fd, command, &lock) != 0) {
        if (errno != EINTR) return errno;
    }
    return 0;
}

int cplatform_lock_byte(int fd, off_t offset, int exclusive, int wait) {
    return cplatform_byte_lock(fd, offset, exclusive ? F_WRLCK : F_RDLCK, wait);
}

int cplatform_unlock_byte(int fd, off_t offset) {
    return cplatform_byte_lock(fd, offset, F_UNLCK, 0);
}

uint32_t cplatform_cpu_hint(void) {
#if defined(__linux__)
    int cpu = sched_getcpu();
    if (cpu >= 0) return (uint32_t)cpu;
#endif
    uint64_t thread = (uint64_t)(uintptr_t)pthread_self();
    return (uint32_t)((thread * 0x9E3779B97F4A7C15ull) >> 32);
}

int cplatform_lower_thread_priority(int increment) {
#if defined(__linux__)
    errno = 0;
    int current = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (current == -1 && errno != 0) return errno;
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), current + increment) == 0 ? 0 : errno;
#else
    (void)increment;
    return 0;
#endif
}

int cplatform_thread_nice(void) {
#if defined(__linux__)
    return getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
#else
    return 0;
#endif
}

int cplatform_release_free_memory(void) {
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}
