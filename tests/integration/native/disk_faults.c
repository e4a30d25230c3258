/*
 * LD_PRELOAD shim for tests: disk faults on the files under $DISK_FAULT_UNDER (and, when
 * $DISK_FAULT_SUFFIX is set, only those whose path ends with it), from the moment the
 * file $DISK_FAULT_TRIGGER exists. $DISK_FAULT_KIND chooses the fault:
 *
 *   fsync-eio   the first fsync() or fdatasync() returns -1 with errno EIO; later ones
 *               succeed. That is what the kernel does: a writeback error is reported to
 *               one fsync, after which the dirty pages may be gone and fsync succeeds
 *               again, which is why a broker must not trust a second fsync (nor write
 *               its clean-shutdown marker) after a failed one.
 *   read-only   every write (write, pwrite, writev) and every open for writing returns
 *               -1 with errno EROFS, as on a filesystem the kernel remounted read-only
 *               after an error (already open descriptors fail too).
 *   fsync-hold  an fsync() or fdatasync() creates "$DISK_FAULT_TRIGGER.held" and then
 *               waits until the trigger file is removed before it syncs: a disk that
 *               takes as long as the test wants (the calling thread is held, the rest
 *               of the process runs on).
 *
 * Every other call goes to the C library unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int fsync_failed = 0;

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))
#define REAL_OPEN REAL("open", int (*)(const char *, int, ...))

static int armed(const char *kind) {
    const char *trigger = getenv("DISK_FAULT_TRIGGER");
    const char *wanted = getenv("DISK_FAULT_KIND");
    return trigger != NULL && wanted != NULL && strcmp(wanted, kind) == 0 &&
           access(trigger, F_OK) == 0;
}

static int path_ends_with(const char *path, const char *suffix) {
    size_t path_length = strlen(path);
    size_t suffix_length = strlen(suffix);
    return path_length >= suffix_length &&
           strcmp(path + path_length - suffix_length, suffix) == 0;
}

static int path_is_under(const char *path) {
    const char *under = getenv("DISK_FAULT_UNDER");
    const char *suffix = getenv("DISK_FAULT_SUFFIX");
    return path != NULL && under != NULL && strncmp(path, under, strlen(under)) == 0 &&
           (suffix == NULL || path_ends_with(path, suffix));
}

static int fd_is_under(int fd) {
    char link[64];
    char target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t length = readlink(link, target, sizeof target - 1);
    if (length < 0) {
        return 0;
    }
    target[length] = '\0';
    return path_is_under(target);
}

static int fsync_fails(int fd) {
    if (fsync_failed || !armed("fsync-eio") || !fd_is_under(fd)) {
        return 0;
    }
    __atomic_store_n(&fsync_failed, 1, __ATOMIC_SEQ_CST);
    return 1;
}

/* fsync-hold: wait while the trigger exists, after saying so in "<trigger>.held". */
static void hold_fsync(int fd) {
    const char *trigger = getenv("DISK_FAULT_TRIGGER");
    char held[4096];
    if (!armed("fsync-hold") || !fd_is_under(fd)) {
        return;
    }
    snprintf(held, sizeof held, "%s.held", trigger);
    int marker = REAL_OPEN(held, O_WRONLY | O_CREAT, 0644);
    if (marker >= 0) {
        close(marker);
    }
    struct timespec pause = {0, 1000000}; /* 1 ms between looks at the trigger */
    while (access(trigger, F_OK) == 0) {
        nanosleep(&pause, NULL);
    }
}

static int write_fails(int fd) { return armed("read-only") && fd_is_under(fd); }

static int open_fails(const char *path, int flags) {
    int writes = (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
    return writes && armed("read-only") && path_is_under(path);
}


int fsync(int fd) {
    hold_fsync(fd);
    if (fsync_fails(fd)) { errno = EIO; return -1; }
    return REAL("fsync", int (*)(int))(fd);
}

int fdatasync(int fd) {
    hold_fsync(fd);
    if (fsync_fails(fd)) { errno = EIO; return -1; }
    return REAL("fdatasync", int (*)(int))(fd);
}

ssize_t write(int fd, const void *buffer, size_t count) {
    if (write_fails(fd)) { errno = EROFS; return -1; }
    return REAL("write", ssize_t (*)(int, const void *, size_t))(fd, buffer, count);
}

ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) {
    if (write_fails(fd)) { errno = EROFS; return -1; }
    return REAL("pwrite", ssize_t (*)(int, const void *, size_t, off_t))(fd, buffer, count, offset);
}

ssize_t pwrite64(int fd, const void *buffer, size_t count, off_t offset) {
    if (write_fails(fd)) { errno = EROFS; return -1; }
    return REAL("pwrite64", ssize_t (*)(int, const void *, size_t, off_t))(fd, buffer, count, offset);
}

ssize_t writev(int fd, const struct iovec *vectors, int count) {
    if (write_fails(fd)) { errno = EROFS; return -1; }
    return REAL("writev", ssize_t (*)(int, const struct iovec *, int))(fd, vectors, count);
}

static mode_t mode_argument(int flags, va_list arguments) {
    return (flags & (O_CREAT | O_TMPFILE)) != 0 ? (mode_t)va_arg(arguments, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    if (open_fails(path, flags)) { errno = EROFS; return -1; }
    return REAL("open", int (*)(const char *, int, ...))(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    if (open_fails(path, flags)) { errno = EROFS; return -1; }
    return REAL("open64", int (*)(const char *, int, ...))(path, flags, mode);
}

int openat(int directory, const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    if (open_fails(path, flags)) { errno = EROFS; return -1; }
    return REAL("openat", int (*)(int, const char *, int, ...))(directory, path, flags, mode);
}

int openat64(int directory, const char *path, int flags, ...) {
    va_list arguments;
    va_start(arguments, flags);
    mode_t mode = mode_argument(flags, arguments);
    va_end(arguments);
    if (open_fails(path, flags)) { errno = EROFS; return -1; }
    return REAL("openat64", int (*)(int, const char *, int, ...))(directory, path, flags, mode);
}
