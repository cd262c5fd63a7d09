#ifndef STORECTL_CSTORESUPPORT_H
#define STORECTL_CSTORESUPPORT_H

/// rename(2) that fails with EEXIST instead of replacing `to`.
/// Linux renameat2(RENAME_NOREPLACE); glibc declares it only under _GNU_SOURCE.
int storectl_rename_noreplace(const char *from, const char *to);

/// The file system type of `path` (statfs(2)'s f_type: 0xEF53 ext4, 0x6969 NFS, …), or -1 with errno.
long long storectl_fs_type(const char *path);

/// sync_file_range(2) (Linux, _GNU_SOURCE). `wait` 0: start writeback of the range and return;
/// 1: also wait for the range's writeback to finish. Returns -1 with errno ENOSYS elsewhere.
int storectl_sync_file_range(int fd, long long offset, long long length, int wait);

/// An unnamed regular file in `folder` (Linux open(2) O_TMPFILE, read-write, `mode`): it has no
/// name to leave behind, whatever ends the process. -1 with errno (EOPNOTSUPP, EISDIR or EINVAL
/// where the file system cannot make one; ENOSYS elsewhere).
int storectl_open_unnamed(const char *folder, unsigned int mode);

/// copy_file_range(2): up to `length` bytes from `from` at `from_offset` to `to` at `to_offset`,
/// within the kernel. The bytes copied, or -1 with errno (ENOSYS, EXDEV, EINVAL: copy by hand).
long long storectl_copy_range(int from, long long from_offset, int to, long long to_offset, long long length);

/// Thread `tid` of this process (a Linux thread id; 0: the calling thread) in the normal
/// scheduling class at nice `nice_value` with a scheduler slice of `slice_ns` (Linux 6.12+: a
/// shorter slice lets a waking thread of another process run sooner instead of waiting for this
/// one's slice to end; 0: the default; earlier kernels: nice alone). 0, or -1 with errno.
int storectl_polite_thread(int tid, int nice_value, unsigned long long slice_ns);

/// The calling thread in the idle scheduling class (SCHED_IDLE: it runs on a core only when no
/// other thread wants it). 0, or -1 with errno (ENOSYS where there is no such class).
int storectl_idle_thread(void);

/// Whether thread `tid` of this process (0: the calling thread) is in the idle scheduling class.
int storectl_thread_is_idle(int tid);

/// The calling thread's scheduling (policy and nice) kept in a thread-local before it is made
/// polite for a scope (`IOPace.politely`): 0, or -1 when it could not be read (nothing kept).
int storectl_keep_thread_sched(void);
/// Puts back the kept scheduling, if any (none: nothing done, 0), and forgets it: 0, or -1 with errno.
int storectl_restore_thread_sched(void);

/// Whether a thread of this process may leave the idle scheduling class for the normal one at
/// nice 0 (an RLIMIT_NICE of 20, or CAP_SYS_NICE): 1, 0, or -1 when it cannot be told.
int storectl_may_leave_idle_class(void);

/// With --json, a crash (a trap, an abort, a bad access) must still leave a JSON error on stdout:
/// installs handlers for SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE and SIGSEGV (on an alternate
/// stack) that write `{"ok":false,"status":128+N,"message":...}` with write(2), then restore the
/// previous handler (Swift's backtracer) and raise the signal again.
void storectl_install_crash_report(void);

/// Caps glibc's malloc arenas (mallopt M_ARENA_MAX) and fixes the size from which blocks are
/// mmapped (M_MMAP_THRESHOLD: freed big blocks go back to the system at once); a no-op elsewhere.
void storectl_tune_malloc(int arenas, int mmap_threshold);

/// Flushes stdout: 0 when everything printed reached it, else the errno of the failure (EIO when
/// an earlier write failed and the stream only remembers that it did).
int storectl_finish_stdout(void);

/// Counts SIGCONTs from the first call on (a handler that only counts: stopping and continuing
/// are the kernel's as before); how many came so far.
long storectl_continued_count(void);

/// Stops seen: a thread ticks every 50 ms from the first call of `storectl_continued_count` on;
/// a SIGCONT counts as a stop when the ticker was stale at its handler (over 250 ms), or a tick
/// gap over 250 ms ends within a second of it. A SIGCONT sent to a process that was not stopped
/// (systemd sends one after every SIGTERM) comes with neither.
long storectl_stops(void);

/// CLOCK_BOOTTIME minus CLOCK_MONOTONIC (ns): grows by the time the machine was suspended.
long long storectl_suspended_ns(void);

/// Keeps up to `bytes` of freed memory at the top of each malloc arena instead of giving it back
/// at once (mallopt M_TRIM_THRESHOLD); a no-op elsewhere.
void storectl_keep_freed_memory(int bytes);

/// Starts `path` with `argv` and `envp` (NULL-terminated) in its own process group, in `cwd`
/// when not NULL, stdin from /dev/null, stdout and stderr into the files `out_path` and
/// `err_path` (created or truncated; /dev/null when NULL). The child inherits no other file
/// descriptor (closefrom(3) in the child, so none opened meanwhile by another thread either),
/// no blocked signal, and default handlers for the usual termination signals. Returns 0 and the
/// pid in `pid_out`, or an errno value.
int storectl_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                   const char *out_path, const char *err_path, int *pid_out);

/// Waits up to `timeout_ms` (-1: no limit) for the child `pid` to exit and reaps it. Returns 1
/// with its wait status in `status`, 0 when it is still running, -1 with errno (ECHILD: not a
/// child of ours, or already reaped). Uses pidfd_open(2) when the kernel has it.
int storectl_wait_child(int pid, int timeout_ms, int *status);

/// The descriptors other processes than this one have open on the file `device`/`inode`, from
/// /proc/<pid>/fd (processes whose folder this user may not read are not seen). Writes up to
/// `max` of them to `pids` and `numbers` (one pair each) and returns how many there are (it may be
/// more than `max`), or -1 with errno when /proc cannot be read.
int storectl_open_descriptors(unsigned long long device, unsigned long long inode, int *pids, int *numbers, int max);

#endif
