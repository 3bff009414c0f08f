// Syscalls that Glibc declares only under _GNU_SOURCE, wrapped for Swift.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include "cplatform.h"

int cplatform_fallocate(int fd, off_t offset, off_t length) {
#ifdef __linux__
    return fallocate(fd, 0, offset, length);
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
