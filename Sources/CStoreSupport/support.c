#define _GNU_SOURCE
#include <malloc.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdio.h>
#include <errno.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include "CStoreSupport.h"

int storectl_rename_noreplace(const char *from, const char *to) {
#ifdef RENAME_NOREPLACE
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
#else
    errno = ENOSYS;
    return -1;
#endif
}

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct sigaction storectl_previous[65];
static const int storectl_crash_signals[] = { SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV };

static void storectl_write_all(const char *text) {
    size_t length = strlen(text);
    while (length > 0) {
        ssize_t n = write(STDOUT_FILENO, text, length);
        if (n <= 0) return;
        text += n;
        length -= (size_t)n;
    }
}

static void storectl_crash_handler(int number) {
    char status[4] = { 0 }, signal_number[3] = { 0 };
    int code = 128 + number;
    status[0] = (char)('0' + code / 100);
    status[1] = (char)('0' + (code / 10) % 10);
    status[2] = (char)('0' + code % 10);
    if (number >= 10) {
        signal_number[0] = (char)('0' + number / 10);
        signal_number[1] = (char)('0' + number % 10);
    } else {
        signal_number[0] = (char)('0' + number);
    }
    storectl_write_all("\n{\"ok\":false,\"status\":");
    storectl_write_all(status);
    storectl_write_all(",\"message\":\"storectl stopped unexpectedly (signal ");
    storectl_write_all(signal_number);
    storectl_write_all("): this is a bug, please report it with the backtrace printed on stderr\","
                       "\"hint\":\"storectl's changes are crash-safe: run `storectl recover STORE` before trying again\"}\n");
    if (number > 0 && number < 65) sigaction(number, &storectl_previous[number], NULL);
    raise(number);
}

void storectl_install_crash_report(void) {
    static char *stack = NULL;
    if (stack == NULL) {
        stack = malloc(65536);
        if (stack != NULL) {
            stack_t alternate = { .ss_sp = stack, .ss_size = 65536, .ss_flags = 0 };
            sigaltstack(&alternate, NULL);
        }
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = storectl_crash_handler;
    action.sa_flags = SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof storectl_crash_signals / sizeof storectl_crash_signals[0]; i++) {
        int number = storectl_crash_signals[i];
        sigaction(number, &action, &storectl_previous[number]);
    }
}

int storectl_sync_file_range(int fd, long long offset, long long length, int wait) {
#ifdef SYNC_FILE_RANGE_WRITE
    unsigned int flags = SYNC_FILE_RANGE_WRITE;
    if (wait) flags |= SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WAIT_AFTER;
    return sync_file_range(fd, (off_t)offset, (off_t)length, flags);
#else
    errno = ENOSYS;
    return -1;
#endif
}

int storectl_open_unnamed(const char *folder, unsigned int mode) {
#ifdef O_TMPFILE
    return open(folder, O_TMPFILE | O_RDWR | O_CLOEXEC, (mode_t)mode);
#else
    errno = ENOSYS;
    return -1;
#endif
}

long long storectl_copy_range(int from, long long from_offset, int to, long long to_offset, long long length) {
#ifdef __linux__
    loff_t in = (loff_t)from_offset, out = (loff_t)to_offset;
    return (long long)copy_file_range(from, &in, to, &out, (size_t)length, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* struct sched_attr as sched_setattr(2) and sched_getattr(2) take it (SCHED_ATTR_SIZE_VER0). */
struct storectl_sched_attr {
    unsigned int size, policy;
    unsigned long long flags;
    int nice;
    unsigned int priority;
    unsigned long long runtime, deadline, period;
};

static int storectl_sched(int tid, unsigned int policy, int nice_value, unsigned long long slice_ns) {
#if defined(__linux__) && defined(SYS_sched_setattr)
    struct storectl_sched_attr attr = { 0 };
    attr.size = sizeof(attr);   /* SCHED_ATTR_SIZE_VER0: 48 bytes */
    attr.policy = policy;       /* 0 SCHED_OTHER, 5 SCHED_IDLE */
    attr.nice = nice_value;
    attr.runtime = slice_ns;    /* Linux 6.12+: the thread's slice; earlier kernels ignore or refuse it */
    if (syscall(SYS_sched_setattr, tid, &attr, 0) == 0) return 0;
    attr.runtime = 0;
    return (int)syscall(SYS_sched_setattr, tid, &attr, 0);
#else
    if (policy != 0 || tid != 0) { errno = ENOSYS; return -1; }
    return setpriority(PRIO_PROCESS, 0, nice_value);
#endif
}

int storectl_polite_thread(int tid, int nice_value, unsigned long long slice_ns) {
    return storectl_sched(tid, 0, nice_value, slice_ns);
}

int storectl_idle_thread(void) {
    return storectl_sched(0, 5, 0, 0);
}

/* Thread `tid`'s policy and nice value: 0, or -1 (errno) where they cannot be read. */
static int storectl_get_sched(int tid, unsigned int *policy, int *nice_value) {
#if defined(__linux__) && defined(SYS_sched_getattr)
    struct storectl_sched_attr attr = { 0 };
    if (syscall(SYS_sched_getattr, tid, &attr, sizeof(attr), 0) != 0) return -1;
    *policy = attr.policy;
    *nice_value = attr.nice;
    return 0;
#else
    (void)tid; (void)policy; (void)nice_value;
    errno = ENOSYS;
    return -1;
#endif
}

int storectl_thread_is_idle(int tid) {
    unsigned int policy = 0;
    int nice_value = 0;
    return storectl_get_sched(tid, &policy, &nice_value) == 0 && policy == 5;   /* SCHED_IDLE */
}

static __thread int storectl_kept = 0;
static __thread unsigned int storectl_kept_policy = 0;
static __thread int storectl_kept_nice = 0;

int storectl_keep_thread_sched(void) {
    unsigned int policy = 0;
    int nice_value = 0;
    if (storectl_kept) return 0;   /* the first state is the one to go back to */
    if (storectl_get_sched(0, &policy, &nice_value) != 0) return -1;
    /* A thread made by a polite one (dispatch makes its pool's threads from the thread that
       queues work) is born in the idle class: what it goes back to is the normal class. */
    storectl_kept_policy = policy == 5 ? 0 : policy;
    storectl_kept_nice = policy == 5 ? 0 : nice_value;
    storectl_kept = 1;
    return 0;
}

int storectl_restore_thread_sched(void) {
    if (!storectl_kept) return 0;
    storectl_kept = 0;
    return storectl_sched(0, storectl_kept_policy, storectl_kept_nice, 0);
}

/* Whether Linux lets a thread of this process leave the idle class for the normal one at nice 0:
   an RLIMIT_NICE of 20 (or unlimited), or CAP_SYS_NICE in the effective set. 1, 0, or -1 when
   it cannot be told (then a probe on a thread says). */
int storectl_may_leave_idle_class(void) {
#if defined(__linux__)
    struct rlimit limit;
    if (getrlimit(RLIMIT_NICE, &limit) == 0 && (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= 20)) return 1;
    FILE *status = fopen("/proc/self/status", "re");
    if (status == NULL) return -1;
    char line[256];
    int answer = -1;
    while (fgets(line, sizeof line, status) != NULL) {
        if (strncmp(line, "CapEff:", 7) == 0) {
            unsigned long long caps = strtoull(line + 7, NULL, 16);
            answer = (int)((caps >> 23) & 1);   /* CAP_SYS_NICE */
            break;
        }
    }
    fclose(status);
    return answer;
#else
    return -1;
#endif
}

void storectl_tune_malloc(int arenas, int mmap_threshold) {
#if defined(__GLIBC__)
    mallopt(M_ARENA_MAX, arenas);
    mallopt(M_MMAP_THRESHOLD, mmap_threshold);
#else
    (void)arenas;
    (void)mmap_threshold;
#endif
}

void storectl_keep_freed_memory(int bytes) {
#if defined(__GLIBC__)
    mallopt(M_TRIM_THRESHOLD, bytes);
#else
    (void)bytes;
#endif
}

#include <spawn.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>

int storectl_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                   const char *out_path, const char *err_path, int *pid_out) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int rc = posix_spawn_file_actions_init(&actions);
    if (rc != 0) return rc;
    rc = posix_spawnattr_init(&attributes);
    if (rc != 0) { posix_spawn_file_actions_destroy(&actions); return rc; }
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&actions, 1, out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rc == 0) rc = posix_spawn_file_actions_addopen(&actions, 2, err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
    if (rc == 0 && cwd != NULL) rc = posix_spawn_file_actions_addchdir_np(&actions, cwd);
#else
    if (rc == 0 && cwd != NULL) rc = ENOSYS;
#endif
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    int reset[] = { SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD, SIGUSR1, SIGUSR2 };
    for (unsigned i = 0; i < sizeof reset / sizeof reset[0]; i++) sigaddset(&defaults, reset[i]);
    if (rc == 0) rc = posix_spawnattr_setsigmask(&attributes, &none);
    if (rc == 0) rc = posix_spawnattr_setsigdefault(&attributes, &defaults);
    if (rc == 0) rc = posix_spawnattr_setpgroup(&attributes, 0);
    if (rc == 0) rc = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    pid_t pid = 0;
    if (rc == 0) rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp);
    if (rc == 0) *pid_out = pid;
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return rc;
}

static int reap_now(int pid, int *status) {
    int r;
    do { r = waitpid(pid, status, WNOHANG); } while (r < 0 && errno == EINTR);
    return r == pid ? 1 : (r < 0 ? -1 : 0);
}

int storectl_wait_child(int pid, int timeout_ms, int *status) {
    int r = reap_now(pid, status);
    if (r != 0 || timeout_ms == 0) return r;
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        struct pollfd watch = { .fd = fd, .events = POLLIN, .revents = 0 };
        int n;
        do { n = poll(&watch, 1, timeout_ms); } while (n < 0 && errno == EINTR);
        close(fd);
        return reap_now(pid, status);
    }
#endif
    for (long waited = 0; timeout_ms < 0 || waited < timeout_ms; waited += 2) {
        usleep(2000);
        r = reap_now(pid, status);
        if (r != 0) return r;
    }
    return 0;
}

int storectl_finish_stdout(void) {
    errno = 0;
    if (fflush(stdout) != 0) return errno != 0 ? errno : EIO;
    return ferror(stdout) ? EIO : 0;
}

#include <time.h>
#include <stdatomic.h>
#include <pthread.h>

static atomic_long continued_count = 0;
static atomic_int continued_installed = 0;

static atomic_llong last_tick = 0;
static atomic_llong last_gap_end = 0;
static atomic_llong last_continue = 0;
static atomic_long stops = 0;

static long long storectl_monotonic_ns(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0;
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* A stop is a SIGCONT that comes with the ticker standing still: its last tick stale when the
   handler runs, or a gap the ticker ends within a second of it (whichever thread ran first after
   the continue). A gap at another time (a stall) beside a SIGCONT sent to a running process
   (systemd after SIGTERM) is not one. */
static void storectl_note_stop_if_near(long long gap_end, long long cont) {
    if (gap_end != 0 && cont != 0 && llabs(gap_end - cont) < 1000000000LL) atomic_fetch_add(&stops, 1);
}

static void storectl_on_continue(int signo) {
    (void)signo;
    atomic_fetch_add(&continued_count, 1);
    long long now = storectl_monotonic_ns();   /* clock_gettime is async-signal-safe */
    long long tick = atomic_load(&last_tick);
    atomic_store(&last_continue, now);
    if (tick != 0 && now - tick > 250000000LL) {
        atomic_fetch_add(&stops, 1);
        atomic_store(&last_gap_end, 0);   /* this stop is counted: the ticker's gap for it is not again */
    } else {
        storectl_note_stop_if_near(atomic_exchange(&last_gap_end, 0), now);
    }
}

static void *storectl_ticker(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);   // the process's handlers run on its other threads
    for (;;) {
        long long now = storectl_monotonic_ns();
        long long before = atomic_exchange(&last_tick, now);
        if (before != 0 && now - before > 250000000LL) {
            long long cont = atomic_load(&last_continue);
            /* The handler ran first (its tick looked fresh: this thread had just been let run). */
            if (cont != 0 && now - cont < 1000000000LL && cont > before) { atomic_fetch_add(&stops, 1); atomic_store(&last_continue, 0); }
            else atomic_store(&last_gap_end, now);
        }
        struct timespec pause = {0, 50000000L};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

long storectl_stops(void) { return atomic_load(&stops); }

long storectl_continued_count(void) {
    if (atomic_exchange(&continued_installed, 1) == 0) {
        atomic_store(&last_tick, storectl_monotonic_ns());
        pthread_t ticker;
        pthread_attr_t attributes;
        if (pthread_attr_init(&attributes) == 0) {
            pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
            pthread_attr_setstacksize(&attributes, 64 * 1024);
            pthread_create(&ticker, &attributes, storectl_ticker, NULL);
            pthread_attr_destroy(&attributes);
        }
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = storectl_on_continue;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART;
        sigaction(SIGCONT, &action, NULL);
    }
    return atomic_load(&continued_count);
}

long long storectl_suspended_ns(void) {
    struct timespec boot, mono;
    if (clock_gettime(CLOCK_BOOTTIME, &boot) != 0 || clock_gettime(CLOCK_MONOTONIC, &mono) != 0) return 0;
    return ((long long)boot.tv_sec - mono.tv_sec) * 1000000000LL + ((long long)boot.tv_nsec - mono.tv_nsec);
}

int storectl_open_descriptors(unsigned long long device, unsigned long long inode, int *pids, int *numbers, int max) {
    DIR *proc = opendir("/proc");
    if (proc == NULL) return -1;
    int self = (int)getpid(), found = 0;
    struct dirent *entry;
    char path[64];
    while ((entry = readdir(proc)) != NULL) {
        char *end = NULL;
        long pid = strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || pid <= 0 || pid == self) continue;
        snprintf(path, sizeof path, "/proc/%ld/fd", pid);
        int fds = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fds < 0) continue;   /* gone, or another user's */
        DIR *list = fdopendir(fds);
        if (list == NULL) { close(fds); continue; }
        struct dirent *fd;
        while ((fd = readdir(list)) != NULL) {
            if (fd->d_name[0] == '.') continue;
            struct stat info;
            /* stat(2) through the magic link: the open file itself, unlinked or not. */
            if (fstatat(fds, fd->d_name, &info, 0) != 0) continue;
            if ((unsigned long long)info.st_dev == device && (unsigned long long)info.st_ino == inode) {
                if (found < max) { pids[found] = (int)pid; numbers[found] = atoi(fd->d_name); }
                found++;
            }
        }
        closedir(list);
    }
    closedir(proc);
    return found;
}

long long storectl_fs_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long long)info.f_type;
}
